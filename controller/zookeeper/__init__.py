"""ZooKeeper access: kazoo bridged to asyncio (``client.py``) and Kafka's znode layout as typed
calls (``data.py``). Used by the ZooKeeper controller and by every broker of a cluster."""
