"""Prometheus figures of a broker, computed at scrape time from :meth:`Broker.snapshot`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
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
        yield from self._topic_flow(snap)
        yield from self._queue_flow(snap)
        backlog = GaugeMetricFamily(
            "mqstore_durable_backlog",
            "Messages a durable subscription has not acknowledged",
            labels=["destination", "client_id", "subscription"],
        )
        for d in snap["durable_subscriptions"]:
            backlog.add_metric([d["destination"], d["client_id"], d["subscription"]], d["backlog"])
        usage = GaugeMetricFamily("mqstore_store_usage_bytes", "Bytes of stored messages")
        usage.add_metric([], snap["store_usage"].get("used", 0))
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
        yield from (depth, consumers, enq, deq, backlog, usage, refused, conns, turned_away)

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
