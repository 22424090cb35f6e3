"""People who sign in to the console: :mod:`.people` (passwords, TOTP, sessions) and
:mod:`.oidc` (an identity provider instead). Below the web layer, above the store."""

from .people import People, Person, SessionEnded, SignInRefused, Step

__all__ = ["People", "Person", "SessionEnded", "SignInRefused", "Step"]
