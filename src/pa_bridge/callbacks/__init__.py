"""The callback receiver: ``POST /callbacks/pharmacy`` from the PA service, committed
before it is acknowledged (decisions 0005, 0045).

* :mod:`.receiver`: the Flask app on ``callbacks.listen`` (credentials, the body limit);
* :mod:`.replies`: the answers in the error shape, for both (plain JSON);
* :mod:`.ingest`: what a body says and the ordering rule (pure functions),
  ``CallbackIntake``, which commits callbacks (dedupe, history, ordering, links, dead
  letters), and ``CallbackReceiver``, the receiver's sink: the commit, then the answer.

The composition root (``runtime.py``) builds the receiver on the service and serves
its app. The receiver and the commit do not import each other (the commit needs
nothing of the web); nothing here imports upward.
"""
