"""The metadata cache every broker answers Metadata from (``cache.py``), written by the
controller side and read by the handlers and the ReplicaManager."""
