"""One typed settings object for every part of mqstore (environment prefix ``MQSTORE_``).

CLI flags mirror these fields; a flag given on the command line wins over the environment.
"""

from __future__ import annotations

import difflib
import logging
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mqstore.errors import ConfigError
from mqstore.schema import MAX_BODY_BYTES, NAME_LENGTH, PREFIX_PATTERN

log = logging.getLogger(__name__)

#: The longest period a setting may give, 100 years: a longer one (or ``inf``) is no period
#: a broker lives to see, and overflows the timers and epoch milliseconds it is turned into.
_MAX_PERIOD_DAYS = 36_500
_MAX_PERIOD_S = _MAX_PERIOD_DAYS * 86_400
_MAX_PERIOD_MS = _MAX_PERIOD_S * 1000


class Settings(BaseSettings):
    """Everything mqstore can be configured with.

    ``dsn`` unset means: start an embedded PostgreSQL under ``data_dir`` (``mqstore serve``
    and ``mqstore db`` do that; library users pass a DSN).
    """

    model_config = SettingsConfigDict(
        env_prefix="MQSTORE_", extra="forbid", env_ignore_empty=True, allow_inf_nan=False
    )

    dsn: str | None = Field(default=None, description="PostgreSQL DSN (postgresql://...)")
    data_dir: Path = Field(
        default=Path("mqstore-data"), description="embedded PostgreSQL and journal"
    )
    table_prefix: str = Field(default="", description="ActiveMQ tablePrefix, e.g. BRK1_")
    broker_name: str = Field(default_factory=lambda: f"mqstore-{socket.gethostname()}")

    lock: Literal["lease", "row", "none"] = "lease"
    lease_ms: int = Field(
        default=10_000, gt=0, le=_MAX_PERIOD_MS, description="ActiveMQ lockAcquireSleepInterval"
    )
    renew_ms: int = Field(
        default=5_000, gt=0, le=_MAX_PERIOD_MS, description="ActiveMQ lockKeepAlivePeriod"
    )
    lock_max_clock_diff_ms: int = Field(
        default=0,
        ge=0,
        le=_MAX_PERIOD_MS,
        description="ActiveMQ maxAllowableDiffFromDBTime; >0 uses the DB clock",
    )

    prioritized_messages: bool = False
    cleanup_interval_s: float = Field(
        default=60.0, ge=0, le=_MAX_PERIOD_S, description="0 disables cleanup"
    )
    cleanup_batch: int = Field(default=1000, gt=0)
    expiry_batch: int = Field(default=1000, gt=0)
    max_message_bytes: int = Field(default=100 * 1024 * 1024, gt=0)

    history: bool = Field(default=True, description="record each removal in MQSTORE_HISTORY")
    history_bodies: bool = Field(default=False, description="keep the MSG bytes in history")
    history_retention_days: float = Field(
        default=0.0,
        ge=0,
        le=_MAX_PERIOD_DAYS,
        description="trim older history rows at each cleanup; 0 keeps all",
    )

    metrics_port: int | None = Field(
        default=None, ge=0, le=65535, description="Prometheus /metrics port"
    )
    transaction_mb: int = Field(
        default=64, ge=0, description="uncommitted transacted sends per connection; 0: no limit"
    )
    max_transactions: int = Field(
        default=100, ge=0, description="open transactions per connection; 0: no limit"
    )
    destination_gc_s: float = Field(
        default=60.0,
        ge=0,
        le=_MAX_PERIOD_S,
        description="forget destinations idle this long; 0 keeps them",
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="address /metrics listens on (0.0.0.0: every one)"
    )
    metrics_per_destination: bool = Field(
        default=True, description="/metrics series for each destination; off: broker-wide only"
    )
    tls_cert: Path | None = Field(
        default=None,
        description="PEM certificate (chain) of the STOMP listener; set: STOMP over TLS only",
    )
    tls_key: Path | None = Field(
        default=None, description="PEM private key of tls_cert (unset: in the certificate file)"
    )
    tls_client_ca: Path | None = Field(
        default=None,
        description="PEM CAs whose client certificates STOMP clients must present; unset: none",
    )
    users_file: Path | None = Field(
        default=None,
        description="STOMP logins, one login=passcode per line (ActiveMQ's users.properties); "
        "unset: no authentication",
    )
    queue_prefetch: int = Field(default=1000, gt=0)
    topic_prefetch: int = Field(default=32766, gt=0)
    durable_topic_prefetch: int = Field(default=100, gt=0)
    max_redeliveries: int = Field(
        default=6, ge=-1, description="then the dead-letter queue; -1: redeliver forever"
    )
    redelivery_delay_ms: int = Field(default=1000, ge=0, le=_MAX_PERIOD_MS)
    dlq_name: str = Field(default="ActiveMQ.DLQ", min_length=1)
    individual_dlq: bool = Field(
        default=False, description="a DLQ per destination (ActiveMQ.DLQ.Queue.NAME)"
    )
    heartbeat_ms: int = Field(
        default=10_000, ge=0, le=_MAX_PERIOD_MS, description="STOMP heart-beat offered"
    )
    max_connections: int = Field(
        default=1000, ge=0, description="client connections served at once; 0: no limit"
    )
    topic_high_water_mb: int = Field(
        default=8, gt=0, description="a topic's producers wait while a subscriber holds more"
    )
    topic_pending_limit: int = Field(
        default=0,
        ge=0,
        description=">0: never wait for non-durable subscribers; drop a slow one's oldest past it",
    )
    queue_high_water_mb: int = Field(
        default=64,
        gt=0,
        description="producers of non-persistent messages to a queue wait while it holds more",
    )
    memory_window_mb: int = Field(
        default=64,
        gt=0,
        description="bytes of stored messages a queue or durable subscription keeps in memory",
    )
    memory_limit_mb: int = Field(
        default=1024,
        gt=0,
        description="bytes of stored messages all queues and durable subscriptions together "
        "keep in memory",
    )
    event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        default="auto", description="broker event loop; auto: uvloop when installed"
    )
    store_usage_mb: int = Field(default=0, ge=0, description="persistent producers wait above")
    store_full_wait_ms: int = Field(
        default=30_000,
        le=_MAX_PERIOD_MS,
        description="how long a producer waits at the store usage limit before an ERROR; "
        "-1: as long as it takes, 0: refused at once",
    )
    memory_full_wait_ms: int = Field(
        default=-1,
        le=_MAX_PERIOD_MS,
        description="how long a producer waits at a queue's or topic's high-water mark before "
        "an ERROR; -1: as long as it takes, 0: refused at once",
    )

    journal: bool = True
    journal_dir: Path | None = None
    journal_sync: str = "always"
    journal_segment_mb: int = Field(default=64, gt=0)
    checkpoint_interval_ms: int = Field(default=1000, gt=0, le=_MAX_PERIOD_MS)
    checkpoint_max_pending_mb: int = Field(default=256, gt=0)

    @field_validator("dsn")
    @classmethod
    def _blank_dsn_is_none(cls, value: str | None) -> str | None:
        """A DSN of only whitespace (an empty secret file's newline) is no DSN: the
        embedded store, as when it is unset."""
        return value if value is None or value.strip() else None

    @field_validator("table_prefix")
    @classmethod
    def _check_prefix(cls, value: str) -> str:
        if value and not PREFIX_PATTERN.fullmatch(value):
            raise ValueError(
                "table prefix must start with a letter and hold only letters, digits and '_' "
                "(at most 31 characters), e.g. BRK1_"
            )
        return value

    @field_validator(
        "data_dir", "journal_dir", "users_file", "tls_cert", "tls_key", "tls_client_ca"
    )
    @classmethod
    def _expand_home(cls, value: Path | None) -> Path | None:
        """``~/...`` as a shell expands it: an environment file or unit sets it unexpanded,
        and a directory literally named ``~`` invites ``rm -rf ~``."""
        return value.expanduser() if value is not None else None

    @field_validator("broker_name")
    @classmethod
    def _check_broker_name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(
                "the broker name is the master lock's holder id and cannot be empty: give "
                "each broker its own, e.g. --broker-name broker-1"
            )
        if len(value) > NAME_LENGTH:
            raise ValueError(
                f"the broker name is {len(value)} characters long; ACTIVEMQ_LOCK.BROKER_NAME "
                f"holds at most {NAME_LENGTH}: give a shorter --broker-name"
            )
        return value

    @field_validator("dlq_name")
    @classmethod
    def _check_dlq_name(cls, value: str) -> str:
        """A queue's own name, as ActiveMQ's ``deadLetterQueue`` takes it: a STOMP
        destination (``/queue/X``) or a stored one (``queue://X``) would name another queue."""
        for form in ("/queue/", "/topic/", "queue://", "topic://", "/"):
            if value.startswith(form):
                bare = value.removeprefix(form) or "ActiveMQ.DLQ"
                raise ValueError(
                    f"the dead-letter queue is set by its name alone, without {form!r}: "
                    f"give e.g. {bare} (clients consume it from /queue/{bare})"
                )
        if not value.strip() or value != value.strip():
            raise ValueError("the dead-letter queue's name is empty or has spaces around it")
        stored = f"queue://{value}"
        if len(stored) > NAME_LENGTH:  # no dead letter could be stored: each move would fail
            raise ValueError(
                f"the dead-letter queue's name is {len(value)} characters long; stored as "
                f"queue://NAME it is {len(stored)}, and ActiveMQ's CONTAINER column holds at "
                f"most {NAME_LENGTH}: give a name of at most {NAME_LENGTH - len('queue://')} "
                "characters"
            )
        return value

    @field_validator("journal_sync")
    @classmethod
    def _check_sync(cls, value: str) -> str:
        from journal.writer import SyncPolicy

        return str(SyncPolicy.parse(value))

    @field_validator("store_full_wait_ms", "memory_full_wait_ms")
    @classmethod
    def _check_wait(cls, value: int) -> int:
        if value < -1:
            raise ValueError(
                f"{value} is not a wait: give -1 (producers wait as long as it takes), 0 "
                "(refuse their SENDs at once) or the milliseconds they may wait"
            )
        return value

    @field_validator("max_message_bytes")
    @classmethod
    def _check_max_message_bytes(cls, value: int) -> int:
        """Refused here, before ``serve`` starts and migrates an embedded server for a
        store that would refuse it (see ``PostgresStore``)."""
        if value > MAX_BODY_BYTES:
            raise ValueError(
                f"{value} is more than PostgreSQL can hand back in one value (it reads "
                f"BYTEA hex-encoded, under 1 GiB): set at most {MAX_BODY_BYTES} (511 MiB)"
            )
        return value

    @model_validator(mode="after")
    def _check_lease(self) -> Settings:
        if self.lock == "lease" and self.renew_ms >= self.lease_ms:
            raise ValueError(  # named as set: these two are environment variables only
                f"MQSTORE_RENEW_MS ({self.renew_ms}) must be shorter than MQSTORE_LEASE_MS "
                f"({self.lease_ms}), or the lease lapses between renewals; e.g. "
                "MQSTORE_LEASE_MS=10000 MQSTORE_RENEW_MS=5000"
            )
        return self

    @property
    def resolved_journal_dir(self) -> Path:
        """Where the journal lives: ``journal_dir`` or ``data_dir/journal``."""
        return self.journal_dir if self.journal_dir is not None else self.data_dir / "journal"


def _source(loc: tuple[int | str, ...], given: dict[str, object]) -> str:
    """What a user set to give the value at ``loc``: its environment variable when it came
    from there, else the setting's name."""
    name = ".".join(str(part) for part in loc) or "settings"
    variable = f"MQSTORE_{name.upper()}"
    return variable if name not in given and variable in os.environ else name


def misspelt_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """``MQSTORE_`` variables that are no setting but look like one's misspelling, with
    that setting's variable (others, such as the Spark jobs' own, are left alone)."""
    known = [f"MQSTORE_{name.upper()}" for name in Settings.model_fields]
    found = {}
    for variable in environ:
        if variable.startswith("MQSTORE_") and variable not in known:
            close = difflib.get_close_matches(variable, known, n=1, cutoff=0.85)
            if close:
                found[variable] = close[0]
    return found


def _reason(message: str) -> str:
    """A validator's own sentence without pydantic's ``Value error,`` in front of it."""
    return message.removeprefix("Value error, ")


def load_settings(**overrides: object) -> Settings:
    """Build settings from the environment plus explicit overrides (``None`` means not given).
    A variable that looks like a misspelt setting is logged as a warning: it is ignored."""
    for variable, meant in misspelt_variables(os.environ).items():
        log.warning(
            "environment variable %s is not an mqstore setting and is ignored; did you mean %s?",
            variable,
            meant,
        )
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(
            f"{_source(err['loc'], given)}: {_reason(err['msg'])}" if err["loc"] else err["msg"]
            for err in exc.errors()  # one about two settings names them itself
        )
        raise ConfigError(f"invalid configuration: {problems}") from None
