"""Prometheus figures of a broker, computed at scrape time from :meth:`Broker.snapshot`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

from mqstore.errors import ConfigError

if TYPE_CHECKING:
    from mqstore.broker.server import Broker

log = logging.getLogger(__name__)


class _BrokerCollector(Collector):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def _snapshot(self) -> dict[str, Any]:
        for _ in range(5):  # the loop thread may change dicts while we read them
            try:
                return self.broker.snapshot()
            except RuntimeError:
                continue
        return {"destinations": {}, "durable_subscriptions": [], "store_usage": {}}

    def collect(self) -> Iterator[Any]:
        snap = self._snapshot()
        if self.broker.config.metrics_per_destination:
            yield from self._per_destination(snap)
        kinds = GaugeMetricFamily(
            "mqstore_destinations", "Destinations the broker knows", labels=["kind"]
        )
        for kind in ("queue", "topic"):
            prefix = f"{kind}://"
            kinds.add_metric([kind], sum(n.startswith(prefix) for n in snap["destinations"]))
        backlog = GaugeMetricFamily(
            "mqstore_durable_backlog",
            "Messages a durable subscription has not acknowledged",
            labels=["destination", "client_id", "subscription"],
        )
        for d in snap["durable_subscriptions"]:
            backlog.add_metric([d["destination"], d["client_id"], d["subscription"]], d["backlog"])
        usage = GaugeMetricFamily("mqstore_store_usage_bytes", "Bytes of stored messages")
        usage.add_metric([], snap["store_usage"].get("used", 0))
        usage_limit = GaugeMetricFamily(
            "mqstore_store_usage_limit_bytes",
            "Bytes of stored messages at which persistent producers wait (0: no limit)",
        )
        usage_limit.add_metric([], snap["store_usage"].get("limit", 0))
        refused = CounterMetricFamily(
            "mqstore_store_usage_refused_sends",
            "SENDs and COMMITs' messages refused with an ERROR at the store usage limit",
        )
        refused.add_metric([], snap["store_usage"].get("refused_sends", 0))
        conns = GaugeMetricFamily("mqstore_connections", "Open STOMP connections")
        conns.add_metric([], snap.get("connections", 0))
        turned_away = CounterMetricFamily(
            "mqstore_refused_connections", "Connections refused past max_connections"
        )
        turned_away.add_metric([], snap.get("refused_connections", 0))
        yield from (kinds, backlog, usage, usage_limit, refused, conns, turned_away)
        yield from self._memory_and_writer(snap)
        yield self._dead_letters()
        yield from self._journal()

    def _per_destination(self, snap: dict[str, Any]) -> Iterator[Any]:
        """The series labelled by destination (left out with metrics_per_destination off)."""
        depth = GaugeMetricFamily(
            "mqstore_destination_depth", "Messages waiting or in flight", labels=["destination"]
        )
        consumers = GaugeMetricFamily(
            "mqstore_destination_consumers", "Active consumers", labels=["destination"]
        )
        enq = CounterMetricFamily(
            "mqstore_destination_enqueued", "Messages enqueued", labels=["destination"]
        )
        deq = CounterMetricFamily(
            "mqstore_destination_dequeued", "Messages consumed", labels=["destination"]
        )
        for name, st in snap["destinations"].items():
            if "depth" in st:
                depth.add_metric([name], st["depth"])
            consumers.add_metric([name], st["consumers"])
            enq.add_metric([name], st["enqueued"])
            deq.add_metric([name], st["dequeued"])
        yield from (depth, consumers, enq, deq)
        yield from self._topic_flow(snap)
        yield from self._queue_flow(snap)

    @staticmethod
    def _memory_and_writer(snap: dict[str, Any]) -> Iterator[Any]:
        """The memory windows against memory_limit, and the store writer's queue."""
        memory = snap.get("memory", {})
        used = GaugeMetricFamily(
            "mqstore_memory_used_bytes",
            "Bytes the memory windows of queues and durable subscriptions hold together",
        )
        used.add_metric([], memory.get("used", 0))
        limit = GaugeMetricFamily(
            "mqstore_memory_limit_bytes",
            "Bytes all memory windows may hold together (memory_limit)",
        )
        limit.add_metric([], memory.get("limit", 0))
        writer = snap.get("store_writer", {})
        backlog = GaugeMetricFamily(
            "mqstore_store_writer_backlog",
            "Store operations (sends, acks, moves) queued for the store, not yet being written",
        )
        backlog.add_metric([], writer.get("backlog", 0))
        ops = CounterMetricFamily(
            "mqstore_store_writer_ops", "Store operations the store writer has written"
        )
        ops.add_metric([], writer.get("ops", 0))
        batches = CounterMetricFamily(
            "mqstore_store_writer_batches", "Batches the store writer has written the ops in"
        )
        batches.add_metric([], writer.get("batches", 0) + writer.get("inline_batches", 0))
        yield from (used, limit, backlog, ops, batches)

    def _dead_letters(self) -> CounterMetricFamily:
        """Messages taken as dead letters, broker-wide, by outcome."""
        moves = CounterMetricFamily(
            "mqstore_dead_letters",
            "Messages taken from a queue or subscription as dead letters, by outcome "
            "(dead-lettered: NACKed, redelivered too often or an undecodable body; expired)",
            labels=["outcome"],
        )
        for outcome, count in sorted(self.broker.dead_letter_counts().items()):
            moves.add_metric([outcome], count)
        return moves

    def _journal(self) -> Iterator[Any]:
        """The local journal and its checkpoints (a broker on a journaled store only)."""
        figures = getattr(self.broker.store, "checkpoint_figures", None)
        if figures is None:
            return
        f: dict[str, float] = figures()
        checkpoints = SummaryMetricFamily(
            "mqstore_journal_checkpoint_duration_seconds",
            "Checkpoints of the journal's window applied to the database, and how long they took",
        )
        checkpoints.add_metric([], int(f["checkpoints"]), f["checkpoint_ms"] / 1000)
        last = GaugeMetricFamily(
            "mqstore_journal_last_checkpoint_duration_seconds", "How long the last checkpoint took"
        )
        last.add_metric([], f["last_checkpoint_ms"] / 1000)
        failures = CounterMetricFamily(
            "mqstore_journal_checkpoint_failures",
            "Checkpoints that failed (the database away, the lock lost, an error); each is retried",
        )
        failures.add_metric([], f["checkpoint_failures"])
        succeeded = GaugeMetricFamily(
            "mqstore_journal_last_checkpoint_success_timestamp_seconds",
            "When a checkpoint last succeeded, applying the window or finding it empty "
            "(seconds since the epoch; 0: none yet)",
        )
        succeeded.add_metric([], f["last_checkpoint_success"])
        pending = GaugeMetricFamily(
            "mqstore_journal_pending_bytes",
            "Bytes journaled and not yet checkpointed to the database (the pending window)",
        )
        pending.add_metric([], f["pending_bytes"])
        pending_limit = GaugeMetricFamily(
            "mqstore_journal_pending_limit_bytes",
            "Bytes of the pending window at which writers wait for a checkpoint",
        )
        pending_limit.add_metric([], f["max_pending_bytes"])
        size = GaugeMetricFamily("mqstore_journal_bytes", "Bytes of journal segments on disk")
        size.add_metric([], f["journal_bytes"])
        segments = GaugeMetricFamily("mqstore_journal_segments", "Journal segments on disk")
        segments.add_metric([], f["segments"])
        failed = GaugeMetricFamily(
            "mqstore_journal_failed",
            "1 once a journal write or sync failed: every write is refused until a restart",
        )
        failed.add_metric([], f["journal_failed"])
        yield from (checkpoints, last, failures, succeeded)
        yield from (pending, pending_limit, size, segments, failed)

    @staticmethod
    def _topic_flow(snap: dict[str, Any]) -> Iterator[Any]:
        """Slow non-durable topic subscribers: bytes held, producers waiting, drops."""
        held = GaugeMetricFamily(
            "mqstore_topic_pending_bytes",
            "Bytes held for non-durable subscribers (waiting messages and unwritten frames)",
            labels=["destination"],
        )
        blocked = GaugeMetricFamily(
            "mqstore_topic_blocked_producers",
            "Producers waiting for a slow subscriber of the topic",
            labels=["destination"],
        )
        dropped = CounterMetricFamily(
            "mqstore_topic_dropped",
            "Messages dropped for slow subscribers (topic_pending_limit)",
            labels=["destination"],
        )
        refused = _refused("topic", "at a slow subscriber of the topic")
        for name, st in snap["destinations"].items():
            if "pending_bytes" in st:
                held.add_metric([name], st["pending_bytes"])
                blocked.add_metric([name], st["blocked_producers"])
                dropped.add_metric([name], st["dropped"])
                refused.add_metric([name], st["refused_sends"])
        yield from (held, blocked, dropped, refused)

    @staticmethod
    def _queue_flow(snap: dict[str, Any]) -> Iterator[Any]:
        """Non-persistent messages queues hold in memory, and producers waiting for room."""
        held = GaugeMetricFamily(
            "mqstore_queue_non_persistent_bytes",
            "Bytes of non-persistent messages a queue holds (waiting or unacknowledged)",
            labels=["destination"],
        )
        blocked = GaugeMetricFamily(
            "mqstore_queue_blocked_producers",
            "Producers of non-persistent messages waiting for room in the queue",
            labels=["destination"],
        )
        refused = _refused("queue", "at the queue's high-water mark")
        for name, st in snap["destinations"].items():
            if "non_persistent_bytes" in st:
                held.add_metric([name], st["non_persistent_bytes"])
                blocked.add_metric([name], st["blocked_producers"])
                refused.add_metric([name], st["refused_sends"])
        yield from (held, blocked, refused)


def _refused(kind: str, where: str) -> CounterMetricFamily:
    """Messages of SENDs (and COMMITs) refused with an ERROR at a destination's limit."""
    return CounterMetricFamily(
        f"mqstore_{kind}_refused_sends",
        f"Messages refused with an ERROR {where} (memory_block_timeout)",
        labels=["destination"],
    )


class BrokerMetrics:
    """A registry holding the broker's figures; optionally served over HTTP."""

    def __init__(self, broker: Broker) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_BrokerCollector(broker))
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` on ``host:port`` (0 picks a port); returns the bound port."""
        try:
            server, thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve /metrics on {host}:{port}: {exc.strerror or exc}; pick another "
                "--metrics-port (MQSTORE_METRICS_PORT) or --metrics-host "
                "(MQSTORE_METRICS_HOST), or stop what listens there"
            ) from None
        self._server, self._thread = server, thread
        bound: int = server.server_address[1]
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound

    @property
    def port(self) -> int | None:
        return None if self._server is None else int(self._server.server_address[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
