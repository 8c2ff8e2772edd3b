"""Topic deletion (Kafka's TopicDeletionManager).

A topic marked under /admin/delete_topics is deleted from every replica (StopReplica with
delete); its znodes go once every replica has confirmed. A replica on a broker that is
down, or that answered with an error, is asked again when its broker registers again (the
controller's broker change does that).
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from gregor.controller.zk_controller.channel import RequestBatch
from gregor.controller.zk_controller.config import ControllerConfig
from gregor.controller.zk_controller.context import ControllerContext
from gregor.controller.zookeeper.client import TransactionFailed
from gregor.controller.zookeeper.data import (
    CONTROLLER_EPOCH_PATH,
    ControllerMovedError,
    KafkaZk,
    delete_topic_path,
)
from gregor.wire.interbroker import StopReplicaRequest, StopReplicaResponse

logger = logging.getLogger(__name__)


class TopicDeletionManager:
    def __init__(self, context: ControllerContext, zk: KafkaZk, config: ControllerConfig) -> None:
        self.context = context
        self.zk = zk
        self.config = config

    async def start(self, name: str, batch: RequestBatch) -> None:
        """StopReplica (delete) to every replica of the topic, which the context has loaded
        unless it is gone; the znodes go once all have answered."""
        ctx = self.context
        if name in ctx.deleting:
            return
        if name not in ctx.topic_ids or not self.config.delete_topic_enable:
            if name in ctx.topic_ids:
                logger.warning("Not deleting topic %s: delete.topic.enable is false", name)
            await self._unmark(name)
            return
        logger.info("Controller %d: deleting topic %s", ctx.broker_id, name)
        pending = set()
        partitions = [(name, p) for p in ctx.topic_partitions[name]]
        batch.add_deleting({tp: ctx.view(tp) for tp in partitions if tp in ctx.states})
        for tp in partitions:
            for broker in ctx.assignments[tp]:
                pending.add((broker, tp[1]))
                if broker in ctx.brokers:
                    batch.add_stop_replica(broker, tp, delete=True, leader_epoch=-1)
        ctx.deleting[name] = pending
        if not pending:
            await self._complete(name)

    def retry_on(self, brokers: set[int], batch: RequestBatch) -> None:
        """Ask the (re)joining `brokers` again to delete the replicas not yet confirmed."""
        for topic, pending in self.context.deleting.items():
            for broker, index in pending:
                if broker in brokers:
                    batch.add_stop_replica(broker, (topic, index), delete=True, leader_epoch=-1)

    async def _unmark(self, name: str) -> None:
        tx = self.zk.zk.transaction()
        tx.check(CONTROLLER_EPOCH_PATH, self.context.epoch_version)
        tx.delete(delete_topic_path(name))
        try:
            await tx.commit()
        except TransactionFailed as e:
            if e.index == 0:
                raise ControllerMovedError("the controller epoch moved") from None
            raise

    async def replicas_deleted(
        self, broker: int, request: StopReplicaRequest, response: StopReplicaResponse
    ) -> None:
        """Replicas confirmed deleted; a topic whose replicas all are is removed. Errors
        leave the replica pending until its broker registers again (Kafka's ineligible
        replicas)."""
        if response.error_code != ErrorCode.none:
            return
        deleted = {
            (t.topic_name, p.partition_index)
            for t in request.topic_states
            for p in t.partition_states
            if p.delete_partition
        }
        done = set()
        for error in response.partition_errors:
            tp = (error.topic_name, error.partition_index)
            pending = self.context.deleting.get(tp[0])
            if pending is not None and tp in deleted and error.error_code == ErrorCode.none:
                pending.discard((broker, tp[1]))
                if not pending:
                    done.add(tp[0])
        for name in sorted(done):
            await self._complete(name)

    async def _complete(self, name: str) -> None:
        await self.zk.delete_topic(name, self.context.epoch_version)
        self.context.forget_topic(name)
        logger.info("Controller %d: deleted topic %s", self.context.broker_id, name)
