"""PAs: submit PA for a claim's transaction, and the PA read model (the feed, one PA
with its history, where to open it, the service's dashboard)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, cast

import ncpdp

from .. import policy
from ..client import ClaimResult, PaServiceClient, ServiceError, best_urls, claim_metadata
from ..logs import log_event
from ..metrics import Metrics
from ..pa_rules import PENDING_PREFIX, claim_match_fields, fields_agree
from ..store import Database, Store, StoreUnavailable, audit, exchanges, now_iso, pa_history, pas
from ..store import outbox as queue_items
from ..store.pas import PaRow
from . import idempotency
from .bodies import (
    Claim,
    ClaimTransactionPa,
    HistoryEntry,
    Pa,
    PaList,
    PaWithHistory,
    SubmitPa,
    read,
)
from .decisions import claim_key
from .errors import (
    BridgeError,
    Conflict,
    Gone,
    InvalidRequest,
    NotFound,
    Refused,
    ServiceFailed,
    ServiceTimeout,
    Unavailable,
)
from .pharmacies import Pharmacies, Scope, check_scope, in_scope

__all__ = ["PaService", "pa_json", "pa_links", "pa_model", "service_error"]


def service_error(e: ServiceError) -> BridgeError:
    """What a service failure is for the caller: it timed out, it is unreachable, it
    lacks claim data it needs (refused), or it answered with an error (TLS included)."""
    kind: type[BridgeError] = {
        "timeout": ServiceTimeout,
        "unreachable": Unavailable,
        "missing_claim_data": Refused,
    }.get(e.code, ServiceFailed)
    return kind(f"service_{e.code}", e.message, e.detail)


def pa_links(row: Mapping[str, Any]) -> tuple[list[str], dict[str, Any], str | None]:
    """(the PA's URLs, its links from callbacks, the one to open): the token link
    (hosted page with ``token_id``) when there is one, else the best link known."""
    urls = json.loads(row["urls_json"] or "[]")
    try:
        links = json.loads(row["links_json"] or "{}") if "links_json" in row.keys() else {}
    except ValueError:
        links = {}
    public = {k: links[k] for k in ("html_url", "pdf_url", "token_urls") if k in links}
    candidates = [*urls, *(links.get("token_urls") or [])]
    candidates += [links[k] for k in ("html_url", "pdf_url") if links.get(k)]
    best = best_urls(candidates)
    return urls, public, best[0] if best else None


def pa_model(row: Mapping[str, Any]) -> Pa:
    """The PA answer for a stored PA: the fields computed here, and every other field
    of :class:`Pa` taken from the column of the same name (a new column shown in the
    answer needs a field in the model and nothing here)."""
    urls, links, url = pa_links(row)
    computed: dict[str, Any] = {
        "pa_id": row["id"],
        "urls": urls,
        "url": url,
        "links": links,
        "link_pending": url is None,
        "open_url": f"/v1/pa/{row['id']}/open",
        "status": row["workflow_status"],
        "deleted": bool(row["deleted"]) or row["gone_at"] is not None,
        "gone": row["gone_at"] is not None,
        # never on a deleted or gone PA: nothing deleted reads as approved (issue 26)
        "expiring": row["expiring_at"] is not None
        and row["renewed_by"] is None
        and not row["deleted"]
        and row["gone_at"] is None,
        "fax_failed": bool(row["fax_failed"]),
        "events": json.loads(row["events_json"] or "[]"),
        "matched": bool(row["matched"]),
        "cursor": str(row["change_seq"]),
    }
    return Pa(**{name: computed[name] if name in computed else row[name] for name in _PA_FIELDS})


_PA_FIELDS = tuple(Pa.model_fields)


def pa_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`pa_model` as a dict (the worklist picks its fields from it)."""
    return pa_model(row).model_dump()


class PaService:
    """``POST /v1/claims/{id}/pa``, ``GET /v1/pa...``, ``GET /v1/dashboard/open``."""

    def __init__(
        self,
        store: Store,
        client: PaServiceClient,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.time,
        pharmacies: Pharmacies | None = None,
    ) -> None:
        self.pharmacies = pharmacies or Pharmacies()
        self.store = store
        self.client = client
        self.metrics = metrics
        self.clock = clock

    def _exchange(self, claim_id: str, scope: Scope = None) -> exchanges.ExchangeRow:
        """The claim; 404 when unknown or of a pharmacy ``scope`` does not include."""
        row = exchanges.get(self.store.reader(), claim_id)
        if row is None or row["kind"] != "claim" or not in_scope(scope, row["provider_id"]):
            raise NotFound("unknown_claim", "no claim with that id", {"claim_id": claim_id})
        return row

    # ---- submit PA -------------------------------------------------------------
    def _pa_for_claim(self, claim_id: str, index: int) -> PaRow | None:
        return pas.for_claim(self.store.reader(), claim_id, index)

    def _reversed_since(self, key: str, since: str) -> bool:
        """Whether a reversal of the claim with ``key`` came in after ``since`` (queued
        or delivered; one store IT dropped does not count)."""
        return queue_items.reversed_since(self.store.reader(), key, since)

    def submit_pa(
        self,
        claim_id: str,
        body: SubmitPa | Mapping[str, Any],
        actor: str,
        idempotency_key: str | None = None,
        scope: Scope = None,
    ) -> tuple[Pa, bool]:
        """Returns (the PA, created now?). A key used before answers that PA again
        (not created now) and sends nothing to the service (decision 0017). The claim
        goes with its pharmacy's credentials; 404 for a claim outside ``scope``."""
        if not isinstance(body, SubmitPa):
            body = read(SubmitPa, body)
        if scope is not None:
            self._exchange(claim_id, scope)
        if idempotency_key is None:
            return self._submit_pa(claim_id, body, actor)
        fp = idempotency.fingerprint(claim_id, body.transaction, body.metadata)
        try:
            earlier = idempotency.earlier(self.store, "submit", idempotency_key, fp)
        except idempotency.IdempotencyConflict:
            raise idempotency.key_reused() from None
        if earlier is not None:
            row = self.get_pa_row(earlier.object_id)
            if row is not None:  # by its provisional id too, once its callback renamed it
                # what the first answer said: created then, or found
                return idempotency.ReplayedPa(**dict(pa_model(row))), bool(earlier.created)
        pa, created = self._submit_pa(claim_id, body, actor)
        try:
            self.store.write(
                lambda db: idempotency.record(
                    db, "submit", idempotency_key, fp, pa.pa_id, created=created
                )
            )
        except idempotency.KeyTaken:
            pass  # a concurrent request with the key: the claim key's lock gave both this PA
        except idempotency.IdempotencyConflict:
            raise idempotency.key_reused() from None
        except StoreUnavailable as e:  # the PA stands; a replay finds it by its claim
            log_event("idempotency.not_saved", level=logging.WARNING, error=type(e).__name__)
        return pa, created

    def _submit_pa(self, claim_id: str, body: SubmitPa, actor: str) -> tuple[Pa, bool]:
        ex = self._exchange(claim_id)
        index = body.transaction
        if not isinstance(index, int) or not 0 <= index < max(1, int(ex["transaction_count"] or 1)):
            raise InvalidRequest(
                "invalid_body",
                "'transaction' must be the index of one of the claim's transactions",
            )
        existing = self._pa_for_claim(claim_id, index)
        if existing is not None:
            return pa_model(existing), False
        creds = self.pharmacies.credentials_for(ex["provider_id"])  # 422 if not configured
        if ex["request_raw"] is None:
            raise Gone(
                "claim_purged", "this claim is older than the retention period; send it again"
            )
        req = ncpdp.parse(ex["request_raw"], strict=False)
        resp = ncpdp.parse(ex["response_raw"] or b"", strict=False)
        tx = resp.as_response().transactions
        if index >= len(tx) or not policy.pa_eligible(tx[index]):
            raise Conflict(
                "not_pa_eligible", "this claim was not rejected for a reason that allows a PA"
            )
        extra = body.metadata or {}
        if not isinstance(extra, dict):
            raise InvalidRequest("invalid_body", "'metadata' must be an object")
        dispensing = {**json.loads(ex["metadata_json"] or "{}"), **extra}
        key = claim_key(req, index)
        # One lock per claim key: two clicks on the same claim (or on two exchanges of
        # the same claim), on one daemon or two, send it once (the store locks it: in
        # this process on SQLite, in the database on PostgreSQL).
        with self.store.claim_lock(key):
            existing = self._pa_for_claim(claim_id, index)
            if existing is not None:
                return pa_model(existing), False
            if self._reversed_since(key, str(ex["received_at"])):
                raise Conflict(
                    "claim_reversed",
                    "this claim was reversed after it was sent; a PA cannot be started for"
                    " it. If it was billed again, send the new claim",
                )
            same = self._live_pa_for_key(key)
            if same is not None:  # a second click: our own records know this claim
                self.metrics.pa_submits.labels("duplicate").inc()
                log_event("pa.second_click", claim_id=claim_id, pa_id=same["id"])
                return pa_model(same), False
            md = claim_metadata(
                req, resp, {str(k): str(v) for k, v in dispensing.items()}, index=index
            )
            try:
                result = self.client.submit_claim(
                    bytes(ncpdp.only_transaction(req, index)), md, credentials=creds
                )
            except ServiceError as e:
                self.metrics.pa_submits.labels(e.code).inc()
                log_event("pa.submit_failed", level=logging.WARNING, claim_id=claim_id, code=e.code)
                raise service_error(e) from None
            rv = req.as_request()
            t = rv.transactions[index] if index < len(rv.transactions) else None
            match = claim_match_fields(
                md.bin_number or rv.bin,
                md.pcn_number or rv.pcn,
                md.group_id or rv.group_id,
                rv.service_provider_id,
                t.product_id if t else None,
                t.rx_number if t else None,
            )
            drug = (t.rx_number, t.product_id) if t else (None, None)
            pa, known = self._store_pa(claim_id, index, key, result, actor, match, drug)
        outcome = "duplicate" if known else ("created" if pa.url else "started")
        self.metrics.pa_submits.labels(outcome).inc()
        log_event(
            "pa.submitted",
            claim_id=claim_id,
            pa_id=pa.pa_id,
            result=outcome,
            links=len(result.pa_urls),
            format=result.format,
        )
        return pa, not known

    def _live_pa_for_key(self, key: str) -> PaRow | None:
        return pas.live_for_claim_key(self.store.reader(), key)

    def _store_pa(
        self,
        claim_id: str,
        index: int,
        key: str,
        result: ClaimResult,
        actor: str,
        match: dict[str, str],
        drug: tuple[str | None, str | None] = (None, None),
    ) -> tuple[Pa, bool]:
        """Store the PA the service answered for; (the PA, already known to our records?).

        The PA id comes from the link(s) (``/request/view/{id}``); an answer without an
        id but with a link gets a local id; an answer without a link (the empty format)
        gets a ``pending-`` id that its first callback replaces (see callbacks/ingest.py),
        unless a callback for it came first, in which case that PA is linked now.
        """
        now = now_iso(self.clock())
        urls = list(result.pa_urls)
        notes: list[str] = []
        if len(urls) > 1:
            notes.append(
                f"the service answered {len(urls)} PA links"
                + (f" (PAs {', '.join(result.pa_ids)})" if result.pa_ids else "")
                + "; all are kept on this PA"
            )
        if not urls:
            notes.append("PA started at the service; its link arrives with its callback")

        def job(db: Database) -> tuple[str, bool]:
            # the feed position first: on PostgreSQL it serializes PA changes across
            # daemons, so what is read below is current (decision 0021)
            seq = self.store.next_seq(db)
            pa_id = result.pa_id
            if pa_id is None and not urls:
                pa_id = self._callback_only_match(db, match)
            if pa_id is None:
                prefix = "local-" if urls else PENDING_PREFIX
                pa_id = prefix + uuid.uuid4().hex[:12]
            row = pas.submit_link(db, pa_id)
            known = row is not None and row["claim_id"] is not None
            if row is None:
                links = {"awaiting": match} if pa_id.startswith(PENDING_PREFIX) else {}
                kept = urls
            else:  # known already (a callback came first, or a duplicate): link it
                kept = [*urls, *(u for u in json.loads(row["urls_json"] or "[]") if u not in urls)]
                links = json.loads(row["links_json"] or "{}")
                links.pop("match", None)
                if known and row["claim_id"] != claim_id:
                    notes.append(
                        f"the service answered with this PA, already known for claim {row['claim_id']}"
                    )
            submitted: pas.Submitted = {
                "pa_id": pa_id,
                "claim_id": claim_id,
                "transaction_index": index,
                "claim_key": key,
                "urls_json": json.dumps(kept),
                "links_json": json.dumps(links),
                "provider_id": match.get("provider") or None,
            }
            record = pas.insert_submitted if row is None else pas.link_submitted
            record(db, submitted, now=now, seq=seq)
            pa_history.add(
                db,
                pa_id,
                now,
                "submit",
                workflow_status=None if row is not None else "New",
                note="; ".join(notes) or None,
            )
            audit.add(db, actor, "pa.submit", pa_id, f"claim {claim_id} transaction {index}")
            pas.set_drug(db, pa_id, *drug)
            return pa_id, known

        try:
            pa_id, known = self.store.write(job)
        except StoreUnavailable as e:
            raise Unavailable(
                "storage_unavailable",
                "the PA was created but could not be saved; click again",
                str(e),
            ) from None
        pa = self.get_pa_row(pa_id)
        assert pa is not None
        return pa_model(pa), known

    @staticmethod
    def _callback_only_match(db: Database, match: dict[str, str]) -> str | None:
        """The one PA first heard of in a callback, not yet tied to a claim, whose
        identifiers agree with this claim's (for an answer that named no PA)."""
        found = []
        for pa_id, links_json in pas.unmatched_from_callbacks(db, 200):
            try:
                seen = json.loads(links_json or "{}").get("match") or {}
            except (ValueError, AttributeError):
                continue
            if fields_agree(match, seen):
                found.append(pa_id)
        return found[0] if len(found) == 1 else None

    # ---- PA reads ------------------------------------------------------------------
    def get_pa_row(self, pa_id: str) -> PaRow | None:
        """The PA by any id it has had: the service's, or the provisional ``pending-``
        id Submit PA answered before its first callback brought the service's."""
        return pas.find(self.store.reader(), pa_id)

    @staticmethod
    def pharmacy_filter(pharmacy: str | None, scope: Scope) -> list[str] | None:
        """The provider ids a read is limited to: ``pharmacy`` (403 outside ``scope``),
        else the scope's, else None (every pharmacy)."""
        if pharmacy is not None:
            pharmacy = pharmacy.strip()
            if not pharmacy:
                raise InvalidRequest("invalid_pharmacy", "'pharmacy' must be a provider id")
            check_scope(scope, pharmacy)
            return [pharmacy]
        return None if scope is None else sorted(scope)

    def _visible(self, row: PaRow | None, scope: Scope) -> PaRow | None:
        """The row, or None when ``scope`` does not include its pharmacy."""
        if row is None or in_scope(scope, row["provider_id"]):
            return row
        return None

    def list_pas(
        self,
        since: str | None,
        limit: int,
        claim_id: str | None = None,
        *,
        pharmacy: str | None = None,
        scope: Scope = None,
    ) -> PaList:
        """The feed (``since`` a cursor), or a claim's PAs. ``pharmacy``: only that
        pharmacy's PAs (403 outside ``scope``); a scoped caller sees only its own."""
        ids = self.pharmacy_filter(pharmacy, scope)
        if claim_id is not None:
            found = self.pas_of_claim(claim_id, scope)
            if pharmacy is not None:
                found.pas = [p for p in found.pas if p.provider_id in (ids or ())]
            return found
        bad = InvalidRequest("invalid_cursor", "'since' must be a cursor from an earlier answer")
        try:
            after = int(since) if since not in (None, "") else 0
        except ValueError:
            raise bad from None
        # cursors are times in microseconds (decision 0009): one below zero or past 63
        # bits was never handed out. One ahead of the clock may have been, after the
        # clock ran ahead and was set back (issue 32): the feed's head decides.
        if after < 0 or after >= 1 << 63:
            raise bad
        upto, newest = pas.feed_head(self.store.reader())
        if after > newest:  # a restore's floor counts: cursors from before it still work
            raise InvalidRequest(
                "invalid_cursor",
                "'since' is beyond the newest change; it was not handed out by this"
                " pa-bridge (start again without 'since', or from a cursor it gave)",
                {"newest_cursor": str(newest)},
            )
        if ids is None:
            rows = pas.since(self.store.reader(), after, limit)
            cursor = str(rows[-1]["change_seq"]) if rows else str(after)
            return PaList(pas=[pa_model(r) for r in rows], cursor=cursor)
        # Filtered: the newest position was read first (``upto``: a change's, never the
        # restore floor), then the matching changes up to it. Positions are handed out in
        # commit order (decision 0021), so every change up to ``upto`` is visible by then,
        # and a page that is not full may move the cursor past the other pharmacies'
        # changes to ``upto`` without skipping any of these.
        rows = pas.since(self.store.reader(), after, limit, upto=upto, provider_ids=ids)
        last = rows[-1]["change_seq"] if len(rows) >= limit else max(after, upto)
        return PaList(pas=[pa_model(r) for r in rows], cursor=str(last))

    def _claim_pas(self, ex: exchanges.ExchangeRow) -> list[tuple[int, PaRow]]:
        """(transaction index in this claim, PA) for each transaction that has one: the
        PA submitted from it, else the live PA of another exchange with the same claim
        key (a re-sent exchange shows the PA of its claim, decision 0017)."""
        db = self.store.reader()
        found: dict[int, PaRow] = {}
        for row in pas.all_for_claim(db, ex["id"]):
            found.setdefault(int(row["transaction_index"] or 0), row)
        try:
            keys = json.loads(ex["claim_keys"] or "[]")
        except ValueError:
            keys = []
        for i, key in enumerate(keys if isinstance(keys, list) else []):
            if i not in found and key:
                same = pas.live_for_claim_key(db, str(key))
                if same is not None:
                    found[i] = same
        return sorted(found.items(), key=lambda item: item[0])

    def pas_of_claim(self, claim_id: str, scope: Scope = None) -> PaList:
        """``GET /v1/pa?claim_id=``: the claim's PAs; 404 for an unknown claim."""
        found = [pa_model(row) for _, row in self._claim_pas(self._exchange(claim_id, scope))]
        cursor = max((int(p.cursor) for p in found), default=0)
        return PaList(pas=found, cursor=str(cursor))

    def get_claim(self, claim_id: str, scope: Scope = None) -> Claim:
        """``GET /v1/claims/{claim_id}``: what was answered, and the claim's PA(s)."""
        self.store.flush()  # the answer's record may be deferred (decision 0025)
        ex = self._exchange(claim_id, scope)
        found = self._claim_pas(ex)
        by_index = {i: row["id"] for i, row in found}
        try:
            answer = json.loads(ex["answer_json"]) if ex["answer_json"] else None
        except ValueError:
            answer = None
        count = max(1, int(ex["transaction_count"] or 1))
        models = [pa_model(row) for _, row in found]
        return Claim(
            claim_id=claim_id,
            received_at=ex["received_at"],
            transaction_code=ex["transaction_code"],
            transaction_count=count,
            provider_id=ex["provider_id"],
            answer=answer,
            transactions=[ClaimTransactionPa(index=i, pa_id=by_index.get(i)) for i in range(count)],
            pa=models[0] if models else None,
            pas=models,
        )

    def get_pa(self, pa_id: str, scope: Scope = None) -> PaWithHistory:
        row = self._visible(self.get_pa_row(pa_id), scope)
        if row is None:
            raise NotFound("unknown_pa", "no PA with that id", {"pa_id": pa_id})
        history = [
            HistoryEntry(
                received_at=h["received_at"],
                source=cast(Any, h["source"]),
                workflow_status=h["workflow_status"],
                plan_outcome=h["plan_outcome"],
                event_time=h["event_time"],
                events=json.loads(h["events_json"]) if h["events_json"] else [],
                note=h["note"],
            )
            for h in pa_history.for_pa(self.store.reader(), row["id"])
        ]
        return PaWithHistory(**dict(pa_model(row)), history=history)

    def pa_open_url(self, pa_id: str, scope: Scope = None) -> str:
        row = self._visible(self.get_pa_row(pa_id), scope)
        if row is None:
            raise NotFound("unknown_pa", "no PA with that id", {"pa_id": pa_id})
        url = pa_links(row)[2]
        if url is None:
            raise NotFound(
                "no_pa_url",
                "PA started, link on its way: the service sends it with the PA's first callback",
            )
        return url

    def dashboard_url(self, pharmacy: str | None = None, scope: Scope = None) -> str:
        """Log in to the service's dashboard as the pharmacy: ``pharmacy`` (its provider
        id) is required when the deployment serves more than one and the caller's scope
        does not narrow it to one."""
        creds = None
        if pharmacy is not None and not pharmacy.strip():
            pharmacy = None
        if self.pharmacies.chain:
            if pharmacy is None:
                choices = sorted(scope) if scope is not None else self.pharmacies.ids()
                if len(choices) != 1:
                    raise InvalidRequest(
                        "missing_pharmacy",
                        "'pharmacy' (the provider id of the store whose dashboard to open)"
                        " is required: this pa-bridge serves several pharmacies",
                        {"parameter": "pharmacy"},
                    )
                pharmacy = choices[0]
            check_scope(scope, pharmacy)
            creds = self.pharmacies.credentials_for(pharmacy)
        elif pharmacy is not None:
            check_scope(scope, pharmacy)
        try:
            token = self.client.dashboard_login(creds)
        except ServiceError as e:
            raise service_error(e) from None
        return self.client.dashboard_url_with_token(token)
