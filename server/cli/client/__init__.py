"""A small blocking Kafka client for the tools (the ``gregor`` CLI, the test harness): one
socket per broker (``connection.py``), records and partition leaders (``records.py``), a
classic-protocol group member (``group_member.py``)."""
