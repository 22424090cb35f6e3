"""The queue's deliverers: outcome reports, reversals (B2 to the service) and webhooks
(each PA change, signed, to the dispensing system). The composition root registers them
with the outbox (:meth:`Deliveries.register`)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import ncpdp

from ..client import (
    Credentials,
    PaServiceClient,
    ServiceError,
    fallback_reason,
    outcome_variables,
)
from ..config import Settings
from ..logs import log_event
from ..outbox import DeliveryFailed, Hold, Outbox
from ..store import Database, Kind, Store, exchanges, now_iso, pa_history, pas
from ..webhooks import WebhookSender
from .decisions import prescriber_fax
from .errors import BridgeError
from .pas import PaService, pa_json
from .pharmacies import Pharmacies

__all__ = ["CONFIGURATION_CODES", "READY_MAX", "Deliveries", "service_failure"]

#: the outcome reports intake hands over in memory, at most (the oldest then fall
#: back to the stored exchange)
READY_MAX = 1024

Variables = dict[str, str]

#: the service's refusals that are about our own credentials or configuration, not
#: the item: 401/403 (username, password, api_key), 404 (a wrong claim_url, or our
#: variables missing), a redirect (a wrong address), a TLS failure (service.verify).
#: Such an item is held until the configuration changes, never failed for good.
CONFIGURATION_CODES = frozenset({"credentials", "missing_variables", "redirect", "tls"})


def service_failure(e: ServiceError) -> DeliveryFailed:
    """A service error as the queue takes it: held for the configuration, retried, or
    failed for good (the service refused the content)."""
    message = f"{e.code}: {e.message}"
    if e.code in CONFIGURATION_CODES:
        return DeliveryFailed(message, reason=e.code, hold=Hold.CONFIGURATION)
    return DeliveryFailed(message, retryable=e.retryable, reason=e.code)


class Deliveries:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        client: PaServiceClient,
        pa_reads: PaService,
        *,
        clock: Callable[[], float] = time.time,
        pharmacies: Pharmacies | None = None,
    ) -> None:
        self.pharmacies = pharmacies or Pharmacies()
        self.settings = settings
        self.store = store
        self.client = client
        self.pa_reads = pa_reads
        self.clock = clock
        cb = settings.callbacks
        self._webhooks = WebhookSender(cb.forward_url, settings.secret(cb.forward_secret))
        self._ready: dict[tuple[str, int], Callable[[], Variables]] = {}
        self._ready_lock = threading.Lock()

    def register(self, outbox: Outbox) -> None:
        outbox.register(Kind.OUTCOME_REPORT, self.outcome_report)
        outbox.register(Kind.REVERSAL, self.reversal)
        outbox.register(Kind.WEBHOOK, self.webhook)

    def close(self) -> None:
        self._webhooks.close()

    def _credentials(self, provider_id: str | None) -> Credentials | None:
        """The credentials of the pharmacy ``provider_id`` (201-B1). An item of a store
        this daemon does not list (taken out of ``[[pharmacies]]``, or not added yet in
        a rolling change) is held for that store: a daemon that lists it takes it, or
        this one after a reload that adds it (``queue list`` shows why)."""
        try:
            return self.pharmacies.credentials_for(provider_id)
        except BridgeError as e:
            pid = e.detail.get("provider_id", "") if isinstance(e.detail, dict) else ""
            raise DeliveryFailed(
                f"{e.code}: {e.message}", reason=e.code, hold=Hold.pharmacy(pid)
            ) from None

    def report_ready(self, claim_id: str, index: int, variables: Callable[[], Variables]) -> None:
        """Intake's hand-off: how to build the outcome report of transaction ``index`` of
        ``claim_id`` from what it parsed already, so its delivery reads and parses
        nothing again. Kept in memory for the next delivery attempt only; the stored
        exchange stays the source after a restart or when too many wait."""
        with self._ready_lock:
            self._ready[(claim_id, index)] = variables
            while len(self._ready) > READY_MAX:
                del self._ready[next(iter(self._ready))]

    def report_variables(self, payload: dict[str, Any]) -> Variables:
        """The outcome report's variables: from intake's hand-off when it is there,
        else from the stored exchange."""
        claim_id, index = str(payload.get("claim_id")), int(payload.get("index", 0))
        with self._ready_lock:
            ready = self._ready.pop((claim_id, index), None)
        if ready is not None:
            return ready()
        content = exchanges.claim_content(self.store.reader(), claim_id)
        if content is None or content["request_raw"] is None:
            raise DeliveryFailed("the claim's content is gone (purged)", retryable=False)
        req = ncpdp.parse(content["request_raw"], strict=False)
        resp = ncpdp.parse(content["response_raw"] or b"", strict=False)
        try:
            metadata = json.loads(content["metadata_json"] or "{}")
        except ValueError:
            metadata = {}
        creds = self._credentials(req.as_request().service_provider_id)
        return outcome_variables(
            req,
            resp,
            index,
            api_key=creds.api_key if creds is not None else self.client.api_key,
            prescriber_fax=prescriber_fax(metadata),
        )

    def outcome_report(self, payload: dict[str, Any]) -> None:
        variables = self.report_variables(payload)
        res = self.client.outcomes(variables, budget_ms=10_000, fallback_message="")
        if res.source != "outcomes":
            error = f"outcomes interface: {res.error or 'no answer'}"
            if fallback_reason(res.error).get("fallback_http_status") in (401, 403):
                # the api_key refused: held until the configuration changes
                raise DeliveryFailed(error, reason="credentials", hold=Hold.CONFIGURATION)
            raise DeliveryFailed(error)

    def reversal(self, payload: dict[str, Any]) -> None:
        row = exchanges.get(self.store.reader(), str(payload.get("exchange_id")))
        if row is None or row["request_raw"] is None:
            raise DeliveryFailed("the reversal's content is gone", retryable=False)
        raw = bytes(row["request_raw"])
        # the row's provider_id is the B2's 201-B1, stored when the B2 was taken in
        # (new_exchange): no parse of the bytes to find it again
        creds = self._credentials(row["provider_id"])
        keys = payload.get("claim_keys") or []
        self._no_newer_pa(keys, row["received_at"])
        try:
            self.client.submit_claim(raw, None, credentials=creds)
        except ServiceError as e:
            raise service_failure(e) from None
        now = now_iso(self.clock())

        def job(db: Database) -> None:
            for key in keys:
                for pa_id in pas.ids_for_claim_key(db, key):
                    pa_history.add(db, pa_id, now, "reversal", note="B2 delivered to the service")

        # The B2 is delivered: a history note that cannot be written now (the database
        # is locked) must not make the delivery count as failed and send it again.
        try:
            self.store.write(job)
        except Exception as e:
            log_event(
                "reversal.history_not_saved",
                level=logging.WARNING,
                reversal_id=payload.get("exchange_id"),
                error=type(e).__name__,
            )

    def _no_newer_pa(self, keys: list[str], taken_in_at: str) -> None:
        """A B2 is never sent once a PA of its claim was made after it was taken in
        (issue 32). The service deletes a claim's PA by the claim: sent now, it would
        delete that newer PA. And such a PA means the one the B2 was for is gone
        already (the service makes no second PA for a claim whose PA is live): the B2
        was sent before (a crash lost its record) or is moot. It fails for good,
        naming the PA, for store IT to drop."""
        reader = self.store.reader()
        newer = [pa_id for key in keys for pa_id in pas.made_after(reader, key, taken_in_at)]
        if newer:
            raise DeliveryFailed(
                f"not sent: PA {', '.join(newer)} of the same claim was made after this"
                " reversal was taken in, and the service would delete it; the PA this B2"
                " was for is gone already. Check, then `pa-bridge queue drop ID`",
                retryable=False,
                reason="newer_pa",
            )

    def webhook(self, payload: dict[str, Any]) -> None:
        """POST one PA change to the dispensing system's webhook (webhooks.py)."""
        row = self.pa_reads.get_pa_row(str(payload.get("pa_id")))
        if row is None:
            raise DeliveryFailed("the PA is gone", retryable=False)
        self._webhooks.deliver(payload, pa_json(row))
