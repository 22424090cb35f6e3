"""Configuration of the sandbox PA service."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "SANDBOX_API_ID",
    "SANDBOX_API_KEY",
    "SANDBOX_PASSWORD",
    "SANDBOX_USERNAME",
    "SandboxConfig",
    "SandboxPharmacy",
]

#: The sandbox's published test credentials (not secrets: anyone may use them).
SANDBOX_USERNAME = "sandbox-pharmacy"
SANDBOX_PASSWORD = "sandbox-password"  # noqa: S105 - published test credential
SANDBOX_API_KEY = "sandbox-api-key"
#: the developer account's api_id for the requests resource (published, like the rest)
SANDBOX_API_ID = "sandbox-api-id"


@dataclass(frozen=True, slots=True)
class SandboxPharmacy:
    """A store's own credentials the sandbox also accepts (a chain's, issue 18). With a
    ``provider_id``, its claims must come from that store (201-B1), as the service's
    rule is "use only the submitting pharmacy's own credentials": else 403."""

    username: str
    password: str
    api_key: str
    provider_id: str | None = None

    def __repr__(self) -> str:
        return f"SandboxPharmacy(username={self.username!r}, provider_id={self.provider_id!r})"


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxConfig:
    """``step_seconds``: time between ePA status changes. ``callback_*``: where status
    callbacks go (also settable at runtime, POST /sandbox/callback-url); ``callback_verify``
    is True, False or a CA bundle path for HTTPS targets. ``db_path``: None keeps PAs in
    memory, else a SQLite file. Callbacks that do not get a 200 are retried after
    ``retry_base_seconds * 2**(attempt-1)``, at most ``retry_max_seconds``. The fault
    drills' timings (``stall_seconds``, ``trickle_seconds``) follow the test payer table.
    ``outcomes_delay_seconds`` delays every outcomes answer.
    ``pharmacies``: more stores' credentials accepted besides the published ones.
    ``api_id``: the one the requests resource takes; ``search_wrapped``: each element
    of ``POST /requests/search``'s answer as ``{"request": {...}}`` instead of bare
    (the interface allows both readings)."""

    username: str = SANDBOX_USERNAME
    password: str = SANDBOX_PASSWORD
    api_key: str = SANDBOX_API_KEY
    step_seconds: float = 1.0
    callback_url: str | None = None
    callback_username: str | None = None
    callback_password: str | None = None
    callback_verify: bool | str = True
    callback_timeout_seconds: float = 5.0
    db_path: str | None = None
    retry_base_seconds: float = 1.0
    retry_max_seconds: float = 60.0
    stall_seconds: float = 5.0
    trickle_seconds: float = 3.0
    #: every outcomes answer waits this long (a real service is tens to hundreds of ms away)
    outcomes_delay_seconds: float = 0.0
    pharmacies: tuple[SandboxPharmacy, ...] = ()
    api_id: str = SANDBOX_API_ID
    search_wrapped: bool = False

    def __repr__(self) -> str:
        return (
            f"SandboxConfig(username={self.username!r}, step_seconds={self.step_seconds}, "
            f"callback_url={'<set>' if self.callback_url else None}, db_path={self.db_path!r})"
        )
