"""The composition root of the use cases, and the intake app built on it.

:func:`build_use_cases` gives each use case what it needs and registers the queue's
deliverers; :func:`create_app` is the intake app on a store and a client, the same
app the daemon serves, for tests (``app.test_client()``) and embedding. The daemon
(runtime.py) adds the scheduler, the callback listener, the sandbox and the
listeners around the same pieces.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flask import Flask

from .callbacks.ingest import CallbackIntake
from .client import PaServiceClient, RequestsResource
from .config import Settings
from .metrics import Metrics
from .outbox import Outbox
from .service import ClaimIntake, Deliveries, PaService, Reversals, UseCases
from .service.pharmacies import Pharmacies
from .service.reconcile import Reconciler
from .store import Store
from .web.intake import create_intake_app

__all__ = ["build_use_cases", "create_app", "make_client", "make_reconciler"]


def build_use_cases(
    settings: Settings,
    store: Store,
    client: PaServiceClient,
    *,
    metrics: Metrics,
    clock: Callable[[], float] = time.time,
    outbox: Outbox | None = None,
) -> UseCases:
    """The composition root of the use cases: each gets what it needs, the queue gets
    its deliverers; nothing below calls back up. ``outbox``: the queue, when it had to
    exist before the client (the daemon's callback receiver wakes it)."""
    metrics.watch_store(store, clock)
    pharmacies = Pharmacies.from_settings(settings)
    if outbox is None:
        outbox = Outbox(store, None, settings.queue, clock=clock)
    pas = PaService(store, client, metrics, clock=clock, pharmacies=pharmacies)
    deliveries = Deliveries(settings, store, client, pas, clock=clock, pharmacies=pharmacies)
    deliveries.register(outbox)
    outbox.can_serve = pharmacies.serves  # items held for a store this daemon lists
    return UseCases(
        settings=settings,
        store=store,
        metrics=metrics,
        outbox=outbox,
        claims=ClaimIntake(
            settings,
            store,
            client,
            metrics,
            wake_queue=outbox.wake,
            report_ready=deliveries.report_ready,
            clock=clock,
            pharmacies=pharmacies,
        ),
        pas=pas,
        reversals=Reversals(store, outbox, clock=clock, pharmacies=pharmacies),
        deliveries=deliveries,
        pharmacies=pharmacies,
        clock=clock,
    )


def make_client(settings: Settings, sandbox_url: str | None = None) -> PaServiceClient:
    """The PA service's client from ``[service]``, or for the sandbox at ``sandbox_url``.

    Its own credentials are a single store's; a chain's calls each carry their
    pharmacy's (``[[pharmacies]]``), and the client's own are then ``[service]``'s if
    given, else the first pharmacy's (only the health probe uses them)."""
    s = settings
    if sandbox_url is not None:
        from .sandbox import SANDBOX_API_KEY, SANDBOX_PASSWORD, SANDBOX_USERNAME

        base = sandbox_url
        return PaServiceClient(
            claim_url=f"{base}/cmmimport/",
            outcomes_url=f"{base}/outcomes.json",
            dashboard_url=f"{base}/dashboard",
            username=SANDBOX_USERNAME,
            password=SANDBOX_PASSWORD,
            api_key=SANDBOX_API_KEY,
            timeout_s=s.service.timeout_seconds,
            claim_framing=s.service.claim_framing,
        )
    username, password, api_key = s.own_credentials()
    return PaServiceClient(
        claim_url=s.service.claim_url or "",
        outcomes_url=s.service.outcomes_url or "",
        dashboard_url=s.service.dashboard_url or "",
        username=username,
        password=password,
        api_key=api_key,
        timeout_s=s.service.timeout_seconds,
        verify=s.service.verify,
        claim_framing=s.service.claim_framing,
    )


def make_reconciler(
    settings: Settings,
    store: Store,
    callbacks: CallbackIntake,
    *,
    metrics: Metrics,
    sandbox_url: str | None = None,
    clock: Callable[[], float] = time.time,
    on_change: Callable[[], None] | None = None,
) -> Reconciler:
    """Reconciliation (issue 28) on the callbacks' apply path: reading from
    ``service.api_url`` with ``service.api_id`` (or each store's), or from the sandbox
    at ``sandbox_url`` with its published api_id; off (and saying why) without them."""
    off = settings.reconcile_off()
    requests: RequestsResource | None = None
    api_id: str | None = None
    if off is None and sandbox_url is not None:
        from .sandbox import SANDBOX_API_ID

        requests = RequestsResource(sandbox_url, timeout_s=settings.service.timeout_seconds)
        api_id = SANDBOX_API_ID
    elif off is None and settings.service.api_url:
        requests = RequestsResource(
            settings.service.api_url,
            timeout_s=settings.service.timeout_seconds,
            verify=settings.service.verify,
        )
        api_id = settings.service.api_id
    elif off is None:
        off = "the sandbox is not running"
    return Reconciler(
        settings,
        store,
        requests,
        callbacks,
        metrics=metrics,
        default_api_id=api_id,
        off=off,
        clock=clock,
        on_change=on_change,
    )


def create_app(
    settings: Settings,
    *,
    store: Store,
    client: PaServiceClient,
    metrics: Metrics | None = None,
    clock: Callable[[], float] = time.time,
    health: Callable[[], dict[str, Any]] | None = None,
) -> Flask:
    """The intake app (local API, console, OpenAPI) over new use cases on ``store``
    and ``client``; they are ``app.extensions["pa_bridge"]`` (close them with
    ``.close()``). Nothing here starts a thread: the queue drains when told to
    (``use_cases.outbox.drain_once()``) unless a scheduler is given to it."""
    use_cases = build_use_cases(settings, store, client, metrics=metrics or Metrics(), clock=clock)
    return create_intake_app(
        use_cases,
        tokens=settings.intake_tokens(),
        scoped_tokens=settings.scoped_intake_tokens(),
        max_body_bytes=settings.intake.max_body_bytes,
        health=health,
        allowed_hosts=settings.intake.allowed_hosts,
    )
