"""The overrides of the one broker the share group tests share with share groups turned off
(``group.share.enable`` is on by default)."""

SHARE_GROUPS_OFF = {"offsets.topic.num.partitions": "1", "group.share.enable": "false"}
