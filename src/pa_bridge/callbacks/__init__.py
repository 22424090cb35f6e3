"""The callback listener: ``POST /callbacks/pharmacy`` from the PA service, committed
by the daemon before it is acknowledged (decisions 0005, 0008, 0013).

One module per part, from the network inwards:

* :mod:`.child`: the listener's process (``python -m pa_bridge.callbacks.child``): the
  ASGI app ``FrontApp`` (credentials, size limit, paths) and the process's ``main``.
  It never opens the database.
* :mod:`.framing`: the hand-over between the child and the daemon over a Unix socket:
  the message kinds, the frames both ways, the child's end (``AsyncFrontChannel``)
  and the daemon's (``FrameServer``, one thread that reads every frame waiting).
* :mod:`.supervisor`: ``CallbackFront``, which starts the child, restarts it when it
  dies and stops it, in the daemon.
* :mod:`.ingest`: the daemon's side: what a body says and the ordering rule (pure
  functions), ``CallbackService``, which commits callbacks (dedupe, history, ordering,
  links, dead letters), and ``CallbackReceiver``, which says what to answer to each
  message of a batch, after the commit.

The composition root (``runtime.py``) builds the receiver on the service and hands
its ``handle`` to the supervisor. Nothing here imports upward, and the package's
``__init__`` imports nothing, so the child loads only what it runs.
"""
