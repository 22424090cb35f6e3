"""Bodies shaped as the real PA service sends them, from the evidence
(``../shared/docs/real-service-evidence.md``, "Pharmacy callbacks"): the request
object wrapped in ``{"request": ...}``, strings where the type is a number or boolean,
``is_epa`` a boolean and ``attachments_included`` a number, ``plan_outcome``, ``memo``
and ``rationale`` possibly null, ``html_url``/``pdf_url``/``thumbnail_urls`` and
``tokens`` with their own links, ``created_at`` and no ``updated_at``, ``events`` empty
on a plain change. Every value is synthetic; the names are the builders' made-up ones.
"""

from __future__ import annotations

import json
from typing import Any

from .builders import PATIENT_FIRST, PATIENT_LAST


def request_object(
    pa_id: str,
    status: str,
    outcome: str | None = None,
    *,
    portal: str = "https://dashboard.example.test",
    token: str = "tok0synthetic0a1b2c3",  # noqa: S107 - a synthetic access token
    events: list[dict[str, Any]] | None = None,
    payer: dict[str, str] | None = None,
    pharmacy: dict[str, str] | None = None,
    prescription: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "memo": None,
        "api_id": "synthetic-api-id",
        "id": pa_id,
        "form_id": "synthetic_form_1",
        "patient": {
            "first_name": PATIENT_FIRST,
            "middle_name": "",
            "last_name": PATIENT_LAST,
            "member_id": "",
            "date_of_birth": "04/07/1961",
            "gender": "f",
        },
        "pharmacy": pharmacy or {"name": "SYNTHETIC PHARMACY", "phone_number": "555-555-0100"},
        "payer": payer or {"bin": "610014", "pcn": "SYNPCN", "group_id": "SYNGRP01"},
        "prescriber": {"npi": "1999999984", "last_name": "DRSYNTH", "fax_number": "555-555-0199"},
        "prescription": prescription
        or {"drug_id": "085705", "name": "SYNTHETIC DRUG", "days_supply": "", "quantity": "30",
            "rationale": None},
        "is_epa": True,
        "href": f"https://api.example.test/requests/{pa_id}",
        "plan_outcome": outcome,
        "workflow_status": status,
        "thumbnail_urls": [f"https://www.example.test/async/thumbnail/?request={pa_id}&mode=plan"],
        "pdf_url": f"{portal}/api/requests/{pa_id}/download",
        "html_url": f"{portal}/requests/{pa_id}",
        "created_at": "2026-11-23T10:00:00Z",
        "state": "OH",
        "urgent": "false",
        "attachments_included": 1,
        "response_from_plan": "outcome not found",
        "tokens": [
            {
                "id": token,
                "request_id": pa_id,
                "href": f"https://api.example.test/requests/tokens/{token}",
                "html_url": f"{portal}/requests/{pa_id}?token_id={token}",
                "pdf_url": f"{portal}/api/requests/{pa_id}/download?token_id={token}",
                "thumbnail_url": f"https://www.example.test/async/thumbnail/?request={pa_id}",
            }
        ],
        "events": events or [],
    }  # fmt: skip


def callback_body(pa_id: str, status: str, outcome: str | None = None, **kw: Any) -> bytes:
    return json.dumps({"request": request_object(pa_id, status, outcome, **kw)}).encode()


def delete_event(time: str = "time") -> dict[str, Any]:
    """The evidence's DELETE event: its ``time`` is the literal string "time" there."""
    return {"type": "DELETE", "time": time, "remote_user": {"display_name": "SYN USER"}}
