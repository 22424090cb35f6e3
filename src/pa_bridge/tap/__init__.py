"""The NCPDP tap and inline modes (issue 30; decisions 0039-0041): for dispensing
systems that cannot call the local API, pa-bridge reads the claim traffic itself.

- tap (:mod:`.copies`): copies of each request and its response arrive on a port;
  each exchange is taken in as ``POST /v1/claims`` takes it;
- inline (:mod:`.inline`): pa-bridge listens where the switch was, forwards each
  request unchanged over its own connections to the switch (:mod:`.upstream`), and
  answers with the payer's bytes, or for a 70/75/76 reject with the outcomes message
  in place of the payer's text (:mod:`.rewrite`); fail-open always.

Both take exchanges in through the use cases (:mod:`.exchanges`); the use cases never
import this package. Framing is ``ncpdp.framing``; which answer is whose,
:mod:`.matching`. :class:`WireListeners` (:mod:`.runner`) runs both on one event loop.
"""

from .runner import WireListeners

__all__ = ["WireListeners"]
