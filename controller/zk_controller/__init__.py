"""The cluster controller on ZooKeeper, split as Kafka's kafka.controller is.

- `controller.py`: ZkController (Kafka's KafkaController): campaigns for `/controller`,
  fails over, runs every event one at a time, and answers brokers and clients.
- `context.py`: its view of the cluster (ControllerContext).
- `partition_states.py`: every leader and ISR it decides, written to ZooKeeper
  (PartitionStateMachine); `election.py`: the leader election rules it applies.
- `alter_partition.py`: the ISR changes partition leaders ask for.
- `reassignment.py`: partition reassignment (KIP-455).
- `topic_deletion.py`: topic deletion (TopicDeletionManager).
- `channel.py`: the requests to brokers (ControllerChannelManager).
- `config.py`: its settings.
"""
