"""Broker settings: prefetch defaults, redelivery policy, dead letters, limits, auth, metrics."""

from __future__ import annotations

import random
import ssl
from dataclasses import dataclass, field

from mqstore.broker.flow import check_block_timeout
from mqstore.broker.frames import Limits
from mqstore.errors import ConfigError
from mqstore.schema import NAME_LENGTH

#: The least ``topic_low_water`` / ``queue_low_water``: a socket's write buffer below this
#: is not waited for.
MIN_LOW_WATER = 128 * 1024


@dataclass(frozen=True, slots=True)
class RedeliveryPolicy:
    """ActiveMQ's RedeliveryPolicy (same defaults). Delays are in milliseconds."""

    maximum_redeliveries: int = 6
    initial_redelivery_delay: int = 1000
    redelivery_delay: int = 1000
    use_exponential_backoff: bool = False
    backoff_multiplier: float = 5.0
    maximum_redelivery_delay: int = -1
    use_collision_avoidance: bool = False
    collision_avoidance_factor: float = 0.15

    def exceeded(self, redelivery_counter: int) -> bool:
        """Whether a message redelivered this many times is poison."""
        return 0 <= self.maximum_redeliveries < redelivery_counter

    def delay(self, redelivery_counter: int) -> int:
        """Milliseconds to wait before redelivery number ``redelivery_counter`` (1-based)."""
        if redelivery_counter <= 0:
            return 0
        delay = float(self.initial_redelivery_delay)
        if redelivery_counter > 1:
            delay = float(self.redelivery_delay)
            if self.use_exponential_backoff:
                delay = self.initial_redelivery_delay * self.backoff_multiplier ** (
                    redelivery_counter - 1
                )
        if self.maximum_redelivery_delay >= 0:
            delay = min(delay, float(self.maximum_redelivery_delay))
        if self.use_collision_avoidance and delay > 0:
            factor = self.collision_avoidance_factor
            delay += delay * random.uniform(-factor, factor)
        return max(0, int(delay))


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Everything the STOMP broker can be told; defaults follow ActiveMQ.

    ``users`` maps login to passcode (None: no authentication). ``store_usage_limit`` is
    in bytes of stored message frames (0: no limit). ``heartbeat_ms`` is what the server
    offers (can send, wants to receive).

    How long a producer waits at a reached limit before its SEND (or COMMIT) is refused
    with an ERROR, nothing of it taken (ActiveMQ's ``sendFailIfNoSpaceAfterTimeout``):
    ``producer_block_timeout`` seconds at the store usage limit, ``memory_block_timeout``
    at a queue's or topic's memory limit (below). None: as long as it takes; 0: refused
    at once (ActiveMQ's ``sendFailIfNoSpace``).

    Topic flow control: a producer to a topic waits while a non-durable subscriber of it
    holds more than ``topic_high_water`` bytes (messages waiting for it plus its
    connection's unwritten frames), or a durable one that many bytes of non-persistent
    messages, until every one holds less than ``topic_low_water``. ``topic_pending_limit``
    > 0 opts out of that for non-durable subscribers: producers never wait for them, and
    their oldest messages are dropped past that many (or past the high-water mark).
    Durable subscribers lose nothing (as in ActiveMQ). ``max_pending_frames`` /
    ``max_pending_bytes`` bound a connection's unwritten MESSAGE frames.

    Queue flow control: only memory holds a queue's non-persistent messages, from their SEND
    until a consumer acknowledges them (waiting, in flight or being dead-lettered). While
    those of one queue come to more than ``queue_high_water`` bytes, producers of
    non-persistent messages to it wait, until it holds less than ``queue_low_water``.
    Persistent messages are bounded by the memory window and the store usage instead.

    Memory window: a queue or durable subscription keeps at most ``memory_window`` stored
    messages, and ``memory_window_bytes`` bytes of them (body + MESSAGE_OVERHEAD each; the
    last one taken may pass it, so a larger message still goes), in memory waiting for
    dispatch; the rest stays in the store until paged in. All windows together keep at most
    ``memory_limit`` bytes (ActiveMQ's broker-wide memoryUsage), but for one message each,
    so every destination still flows.
    """

    broker_name: str = "localhost"
    users: dict[str, str] | None = None
    queue_prefetch: int = 1000
    durable_topic_prefetch: int = 100
    topic_prefetch: int = 32766
    #: The most messages one consumer may have unacknowledged: a larger prefetch (header
    #: ``activemq.prefetchSize`` or a default above) is lowered to it, as ActiveMQ's client
    #: lowers every prefetch to its MAX_PREFETCH_SIZE (32766).
    max_prefetch: int = 32766
    redelivery: RedeliveryPolicy = field(default_factory=RedeliveryPolicy)
    dlq_name: str = "ActiveMQ.DLQ"
    individual_dlq: bool = False
    dlq_non_persistent: bool = False
    limits: Limits = field(default_factory=Limits)
    max_pending_frames: int = 1000
    max_pending_bytes: int = 4 << 20
    max_pipelined_sends: int = 1000
    #: Bytes of uncommitted transacted SENDs one connection may hold (size + 256 each; the
    #: SEND that crosses it is still taken, so one large message goes); past it the next
    #: transacted SEND gets an ERROR and the connection's transactions are rolled back.
    #: 0: no limit.
    max_transaction_bytes: int = 64 << 20
    #: Transactions one connection may have open at once (BEGIN without COMMIT or ABORT);
    #: one more BEGIN gets an ERROR and the connection's transactions are rolled back.
    #: 0: no limit (as ActiveMQ, which has none).
    max_transactions: int = 100
    store_usage_limit: int = 0
    producer_block_timeout: float | None = 30.0
    memory_block_timeout: float | None = None
    memory_window: int = 2000
    memory_window_bytes: int = 64 << 20
    memory_limit: int = 1 << 30
    topic_pending_limit: int = 0
    topic_high_water: int = 8 << 20
    topic_low_water: int = 4 << 20
    queue_high_water: int = 64 << 20
    queue_low_water: int = 32 << 20
    heartbeat_ms: tuple[int, int] = (10000, 10000)
    heartbeat_grace: float = 1.5
    connect_timeout: float = 30.0
    max_batch: int = 1000
    expiry_interval: float = 1.0
    #: Seconds a destination stays idle (no message, consumer, durable subscription or
    #: waiting producer) before the broker forgets it (ActiveMQ's gcInactiveDestinations);
    #: 0 keeps every destination until the broker stops.
    destination_gc_after: float = 60.0
    expiry_batch: int = 1000
    cleanup_interval: float = 30.0
    metrics_port: int | None = None
    #: Open client connections the broker serves at once (ActiveMQ's maximumConnections);
    #: one more gets an ERROR frame and is closed. 0: no limit.
    max_connections: int = 1000
    #: TLS for the STOMP listener (:func:`mqstore.broker.tls.server_context`); None: plain TCP.
    tls: ssl.SSLContext | None = None
    metrics_host: str = "127.0.0.1"
    #: Serve the series labelled by destination on /metrics (depth, consumers, counters,
    #: flow control); off, only the broker-wide ones (a broker with thousands of
    #: destinations would otherwise serve several series for each at every scrape).
    metrics_per_destination: bool = True
    stop_timeout: float = 10.0

    def __post_init__(self) -> None:
        check_block_timeout("producer_block_timeout", self.producer_block_timeout)
        if self.max_connections < 0:
            raise ConfigError(
                f"max_connections ({self.max_connections}) must be 0 (no limit) or more"
            )
        if self.max_transactions < 0:
            raise ConfigError(
                f"max_transactions ({self.max_transactions}) must be 0 (no limit) or more"
            )
        check_block_timeout("memory_block_timeout", self.memory_block_timeout)
        if self.max_prefetch < 1:
            raise ConfigError(f"max_prefetch ({self.max_prefetch}) must be at least 1")
        if self.memory_window < 1 or self.memory_window_bytes < 1 or self.memory_limit < 1:
            raise ConfigError(
                f"memory_window ({self.memory_window}), memory_window_bytes "
                f"({self.memory_window_bytes}) and memory_limit ({self.memory_limit}) must be "
                "at least 1"
            )
        for kind in ("topic", "queue"):
            low, high = getattr(self, f"{kind}_low_water"), getattr(self, f"{kind}_high_water")
            if not MIN_LOW_WATER <= low <= high:
                raise ConfigError(
                    f"{kind}_low_water ({low}) must be at least {MIN_LOW_WATER} bytes and at "
                    f"most {kind}_high_water ({high})"
                )

    # -- dead-letter queue naming ----------------------------------------------------------
    def dlq_for(self, container: str) -> str:
        """The dead-letter container for messages of ``container``: with individual DLQs its
        own (``queue://ActiveMQ.DLQ.Queue.NAME``, ``...Topic.NAME``), unless that name would
        not fit the CONTAINER column: then the shared one (see :meth:`individual_dlq_too_long`)."""
        if self.individual_dlq and not self.individual_dlq_too_long(container):
            return self.individual_dlq_name(container)
        return f"queue://{self.dlq_name}"

    def individual_dlq_too_long(self, container: str) -> bool:
        """Whether ``container`` has individual DLQs but its DLQ's name is longer than a
        CONTAINER holds (250): its dead letters go to the shared DLQ instead."""
        return self.individual_dlq and len(self.individual_dlq_name(container)) > NAME_LENGTH

    def individual_dlq_name(self, container: str) -> str:
        """The name an individual DLQ of ``container`` has (whether or not it fits)."""
        kind, _, name = container.partition("://")
        return f"queue://{self.dlq_name}.{kind.capitalize()}.{name}"
