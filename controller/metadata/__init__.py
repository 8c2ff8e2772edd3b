"""The metadata every broker answers from, below replica and apart from the controller: the
cache (``cache.py``), written by the controller side and read by the handlers and the
ReplicaManager, and the names it is keyed by (``topic_names.py``, ``config_resource.py``)."""
