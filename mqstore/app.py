"""The composition root: settings → database → store (plain or journaled) → broker."""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore import db
from mqstore.broker import Broker, BrokerConfig, eventloop
from mqstore.broker.config import RedeliveryPolicy
from mqstore.broker.frames import Limits
from mqstore.embedded import EmbeddedPostgres
from mqstore.embedded.server import stop_signals
from mqstore.errors import (
    ConfigError,
    DatabaseUnavailableError,
    JournalFailedError,
    LockLostError,
    SchemaError,
)
from mqstore.journal_claim import claim_journal
from mqstore.lock import ExclusiveLease, LeaseLocker, Locker, NoLocker, RowLocker
from mqstore.schema import build_schema
from mqstore.settings import Settings
from mqstore.store import PostgresStore, Store

log = logging.getLogger(__name__)


@dataclass
class Database:
    """A reachable database: its DSN, an engine, and the embedded server if we started one."""

    dsn: str
    engine: Engine
    embedded: EmbeddedPostgres | None

    def close(self) -> None:
        self.engine.dispose()
        if self.embedded is not None:
            self.embedded.close()


#: How long a command that only reads waits for a lock another session holds on a table
#: (a migration, an operator's LOCK TABLE) before it says so, rather than hanging.
READ_LOCK_WAIT_MS = 10_000


def _wait_for_locks(engine: Engine, wait_ms: int) -> None:
    """Every new session of ``engine`` waits at most ``wait_ms`` for a lock (lock_timeout),
    unless the DSN sets a lock_timeout of its own."""

    @sa.event.listens_for(engine, "connect")
    def _set(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute("SELECT current_setting('lock_timeout')")
            own = cursor.fetchone()[0]
            if own in ("0", "0ms"):
                cursor.execute(f"SET SESSION lock_timeout = {int(wait_ms)}")
            dbapi_conn.commit()
        finally:
            cursor.close()


@contextmanager
def open_database(settings: Settings, *, read_only: bool = False) -> Iterator[Database]:
    """Connect to ``settings.dsn``, or start the embedded PostgreSQL when no DSN is set.
    ``read_only``: a command that only reads, which waits for a table another session has
    locked for at most :data:`READ_LOCK_WAIT_MS` and then says so."""
    embedded: EmbeddedPostgres | None = None
    dsn = settings.dsn
    if dsn is None:
        embedded = EmbeddedPostgres(settings.data_dir, stop_on_close=True)
        try:
            dsn = embedded.start()
        except BaseException:  # Ctrl-C, SIGTERM: the server may have become ours
            embedded.close()
            raise
    engine = db.create_engine(dsn)
    if read_only:
        _wait_for_locks(engine, READ_LOCK_WAIT_MS)
    database = Database(dsn, engine, embedded)
    try:
        db.check_connection(engine)
        yield database
    except sa.exc.DBAPIError as exc:
        refusal = _schema_refusal(engine, settings.table_prefix, exc)
        if refusal is None:
            raise
        raise refusal from None
    finally:
        database.close()


def _schema_refusal(engine: Engine, prefix: str, exc: sa.exc.DBAPIError) -> SchemaError | None:
    """For a statement naming a table or column the database lacks while some of the
    prefix's tables are there: the one line that says the schema differs. None for other
    errors, and when none of them is there (what to do then says the CLI's own line)."""
    detail = db.undefined_object(exc)
    if detail is None:
        return None
    schema = build_schema(prefix)
    names = {table.name for table in schema.tables} | {schema.version_table}
    try:
        with engine.connect() as conn:
            present = names & set(sa.inspect(conn).get_table_names())
    except sa.exc.DBAPIError:  # the database went away meanwhile: its error is the one to say
        return None
    return db.schema_differs(detail) if present else None


def require_schema(engine: Engine, prefix: str) -> None:
    """Refuse, before anything is written, a database not at this mqstore's revision or
    whose tables would refuse the broker's writes: a table or column missing, a column of
    another type, length or nullability, a CHECK constraint, trigger or rule added (the
    differences `mqstore db check` lists that make statements fail, each with what to do;
    :func:`mqstore.drift.write_refusals`). A journaled broker would otherwise acknowledge
    messages whose checkpoint can never be written."""
    from mqstore import migrate
    from mqstore.drift import write_refusals

    with engine.connect() as conn:
        migrate.require_head(conn, prefix)
        refusals = write_refusals(conn, prefix)
    if refusals:
        raise db.schema_differs("; ".join(refusals))


def check_lock_settings(settings: Settings) -> None:
    """Refuse the row lock for a journaled broker (see :func:`build_locker`)."""
    if settings.journal and settings.lock == "row":
        raise ConfigError(
            "the row lock pairs this broker with ActiveMQ standbys, which a local journal "
            "cannot serve (a standby would see a stale database): use --no-journal with "
            "--lock row, or keep the journal with --lock lease or --lock none"
        )


def require_writable(engine: Engine) -> None:
    """Refuse a database that takes no writes (a hot standby, ``default_transaction_read_only``):
    a broker on it would retry its lock for ever, or, without one, accept messages it cannot
    store."""
    with engine.connect() as conn:
        read_only = conn.execute(sa.text("SHOW transaction_read_only")).scalar() == "on"
    if read_only:
        raise DatabaseUnavailableError(
            f"the database at {db.redact(engine.url)} is read-only: {db.STATEMENT_ADVICE['25006']}"
        )


def build_locker(settings: Settings, engine: Engine) -> Locker:
    """The master lock the settings ask for.

    With the journal on, the lease is held exclusively (a journaled broker never waits as a
    standby) and the row lock, which exists only to pair with ActiveMQ standbys, is refused.
    Without a lock, the store still refuses to start while another broker is master
    (:class:`NoLocker` given the engine).
    """
    schema = build_schema(settings.table_prefix)
    check_lock_settings(settings)
    if settings.lock == "lease":
        lease = LeaseLocker(
            engine,
            schema,
            settings.broker_name,
            lease_ms=settings.lease_ms,
            renew_ms=settings.renew_ms,
            max_clock_diff_ms=settings.lock_max_clock_diff_ms,
        )
        return ExclusiveLease(lease) if settings.journal else lease
    if settings.lock == "row":
        return RowLocker(engine, schema, settings.broker_name, renew_ms=settings.renew_ms)
    return NoLocker(engine, schema, settings.broker_name)


def build_store(
    settings: Settings,
    engine: Engine,
    locker: Locker | None = None,
    *,
    on_lock_lost: Callable[[], None] | None = None,
) -> Store:
    """A PostgreSQL store, wrapped by the journal when ``settings.journal`` is on.

    ``on_lock_lost`` is called once, from the store's keeper thread, when another broker
    took the master lock (not while the database merely does not answer).
    """
    pg = PostgresStore(
        engine,
        prefix=settings.table_prefix,
        locker=locker if locker is not None else build_locker(settings, engine),
        on_lock_lost=on_lock_lost,
        prioritized=settings.prioritized_messages,
        history=settings.history,
        history_bodies=settings.history_bodies,
        history_retention_days=settings.history_retention_days,
        max_message_bytes=settings.max_message_bytes,
        cleanup_interval_s=settings.cleanup_interval_s,
        cleanup_batch=settings.cleanup_batch,
    )
    if not settings.journal:
        return pg
    from journal.store import JournaledStore

    return JournaledStore(
        pg,
        settings.resolved_journal_dir,
        sync_policy=settings.journal_sync,
        segment_size=settings.journal_segment_mb * 1024 * 1024,
        checkpoint_interval_ms=settings.checkpoint_interval_ms,
        max_pending_bytes=settings.checkpoint_max_pending_mb * 1024 * 1024,
        broker_name=settings.broker_name,
        shared_lock=False,  # build_locker made the lease exclusive for a journaled store
    )


def broker_config(settings: Settings) -> BrokerConfig:
    """The STOMP broker's configuration from the settings."""
    return BrokerConfig(
        broker_name=settings.broker_name,
        users=read_users(settings.users_file) if settings.users_file is not None else None,
        queue_prefetch=settings.queue_prefetch,
        topic_prefetch=settings.topic_prefetch,
        durable_topic_prefetch=settings.durable_topic_prefetch,
        redelivery=RedeliveryPolicy(
            maximum_redeliveries=settings.max_redeliveries,
            initial_redelivery_delay=settings.redelivery_delay_ms,
            redelivery_delay=settings.redelivery_delay_ms,
        ),
        dlq_name=settings.dlq_name,
        individual_dlq=settings.individual_dlq,
        limits=Limits.for_messages(settings.max_message_bytes),
        heartbeat_ms=(settings.heartbeat_ms, settings.heartbeat_ms),
        max_connections=settings.max_connections,
        tls=_tls(settings),
        topic_high_water=settings.topic_high_water_mb << 20,
        topic_low_water=settings.topic_high_water_mb << 19,  # producers go on at half
        topic_pending_limit=settings.topic_pending_limit,
        queue_high_water=settings.queue_high_water_mb << 20,
        queue_low_water=settings.queue_high_water_mb << 19,  # producers go on at half
        memory_window_bytes=settings.memory_window_mb << 20,
        memory_limit=settings.memory_limit_mb << 20,
        metrics_port=settings.metrics_port,
        metrics_host=settings.metrics_host,
        metrics_per_destination=settings.metrics_per_destination,
        destination_gc_after=settings.destination_gc_s,
        max_transaction_bytes=settings.transaction_mb << 20,
        max_transactions=settings.max_transactions,
        store_usage_limit=settings.store_usage_mb * 1024 * 1024,
        producer_block_timeout=_seconds(settings.store_full_wait_ms),
        memory_block_timeout=_seconds(settings.memory_full_wait_ms),
        cleanup_interval=0,  # the store runs it (and the history trim) on its own thread
        expiry_batch=settings.expiry_batch,
    )


def _tls(settings: Settings) -> ssl.SSLContext | None:
    """The STOMP listener's TLS context, when a certificate is set."""
    if settings.tls_cert is None:
        if settings.tls_key is not None or settings.tls_client_ca is not None:
            raise ConfigError(
                "MQSTORE_TLS_KEY and MQSTORE_TLS_CLIENT_CA need MQSTORE_TLS_CERT (--tls-cert): "
                "give the listener's certificate too"
            )
        return None
    from mqstore.broker.tls import server_context

    return server_context(settings.tls_cert, settings.tls_key, settings.tls_client_ca)


def _seconds(wait_ms: int) -> float | None:
    """A flow-control wait setting in BrokerConfig's terms (-1 ms: None, no end)."""
    return None if wait_ms < 0 else wait_ms / 1000


def read_users(path: Path) -> dict[str, str]:
    """STOMP logins from ``login=passcode`` lines (``#`` and ``!`` start comments), as in
    ActiveMQ's ``users.properties``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read the users file {path}: {exc.strerror or exc}; "
            "give MQSTORE_USERS_FILE a readable file of login=passcode lines"
        ) from None
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        login, sep, passcode = line.partition("=")
        if not sep or not login.strip():
            raise ConfigError(f"{path}:{number}: expected login=passcode, got {line!r}")
        users[login.strip()] = passcode.strip()
    if not users:
        raise ConfigError(
            f"the users file {path} holds no login: every client would be refused; "
            "add login=passcode lines, or unset MQSTORE_USERS_FILE"
        )
    return users


def serve(settings: Settings, host: str, port: int) -> None:
    """Run the STOMP broker on the store until SIGTERM/SIGINT, then shut down gracefully.

    A broker deposed by another (its lock taken) stops as ActiveMQ's does: it stops
    listening, closes its client connections and raises :class:`LockLostError`, so the
    command exits non-zero for a supervisor to restart it (it then waits as a standby).
    A database that does not answer for a while deposes nobody.
    """
    config = broker_config(settings)  # bad settings fail before the database starts
    check_lock_settings(settings)
    with claim_journal(settings):  # before anything is done in the data directory
        raise_file_limit(config.max_connections)
        _serve_claimed(settings, config, host, port)


def _serve_claimed(settings: Settings, config: BrokerConfig, host: str, port: int) -> None:
    """:func:`serve`, once the journal directory is this process's."""
    with open_database(settings) as database:
        if database.embedded is not None:
            from mqstore import migrate

            migrate.upgrade(database.engine, settings.table_prefix)
        require_writable(database.engine)
        require_schema(database.engine, settings.table_prefix)
        stop = threading.Event()
        deposed = threading.Event()
        for sig in stop_signals():
            signal.signal(sig, lambda *_: stop.set())

        def lock_lost() -> None:  # from the store's keeper thread
            deposed.set()
            stop.set()

        store = build_store(settings, database.engine, on_lock_lost=lock_lost)
        pg = _postgres_of(store)
        log.info("waiting for the master lock (%s)", settings.lock)
        try:
            pg.start(stop)  # a standby waits here until it is master (or SIGTERM)
            if store is not pg:
                store.start()  # the journal: replayed onto the started database store
        except Exception:
            if stop.is_set() and not deposed.is_set():
                return
            raise
        journal_failure = _watch_journal(store, stop)
        try:
            eventloop.run(_run_broker(Broker(store, config), host, port, stop), settings.event_loop)
        finally:
            store.stop()
        if journal_failure:
            raise JournalFailedError(
                f"this broker stopped: its journal in {settings.resolved_journal_dir} failed "
                f"({journal_failure[0]}); what it acknowledged was checkpointed to the "
                "database. Fix the cause (disk, permissions, a deleted directory) and restart it"
            )
        if deposed.is_set():
            raise LockLostError(
                f"this broker stopped: it lost the master lock ({pg.locker.lost_reason or 'taken'})"
                + (
                    "; restart it to apply its journal once it can hold the lock again"
                    if store is not pg
                    else "; restart it to wait as a standby"
                )
            )


#: Descriptors a broker needs besides its client connections: the database pool, the
#: journal's segments, the metrics listener, the embedded server's locks, logs.
FILE_HEADROOM = 256


def raise_file_limit(max_connections: int) -> None:
    """Raise this process's soft limit on open files (often 1024) towards the hard one, so
    that ``max_connections`` clients fit; warn when even the hard limit is too low."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if max_connections == 0 else max_connections + FILE_HEADROOM
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, wanted, exc)
    needed = max_connections + FILE_HEADROOM
    if max_connections and soft != resource.RLIM_INFINITY and soft < needed:
        log.warning(
            "the open-file limit (%d) is below max_connections (%d) + %d: past about %d "
            "connections accepting fails; raise it (ulimit -n, LimitNOFILE=) or lower "
            "MQSTORE_MAX_CONNECTIONS",
            soft, max_connections, FILE_HEADROOM, max(0, soft - FILE_HEADROOM),
        )  # fmt: skip


def _watch_journal(store: Store, stop: threading.Event) -> list[BaseException]:
    """For a journaled store: a thread that sets ``stop`` once the journal fails, since
    every write is refused from then on (a supervisor restarts the broker, whose recovery
    re-reads the log). Returns the list the failure is put in."""
    failure: list[BaseException] = []
    if isinstance(store, PostgresStore):
        return failure
    from journal.store import JournaledStore

    assert isinstance(store, JournaledStore)

    def watch() -> None:
        while not stop.wait(JOURNAL_WATCH_S):
            if (exc := store.failure) is not None:
                log.error("the journal failed (%s): stopping the broker", exc)
                failure.append(exc)
                stop.set()

    threading.Thread(target=watch, name="mqstore-journal-watch", daemon=True).start()
    return failure


#: How often serve looks whether the journal failed.
JOURNAL_WATCH_S = 0.5


def _postgres_of(store: Store) -> PostgresStore:
    """The database store under ``store`` (itself, or the one the journal wraps)."""
    if isinstance(store, PostgresStore):
        return store
    from journal.store import JournaledStore

    assert isinstance(store, JournaledStore)
    return store.pg


def host_port(host: str, port: int) -> str:
    """``HOST:PORT`` as ``--stomp`` takes it (an IPv6 address in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _run_broker(broker: Broker, host: str, port: int, stop: threading.Event) -> None:
    try:
        await broker.start(host, port)
    except OSError as exc:  # a port in use, a host name that does not resolve, ...
        raise ConfigError(
            f"cannot listen for STOMP on {host_port(host, port)}: {exc.strerror or exc}; give "
            "--stomp an address of this host and a free port, or stop what listens there"
        ) from None
    log.info("mqstore serving STOMP on %s", host_port(host, broker.port))
    print(f"mqstore serving STOMP on {host_port(host, broker.port)}", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, stop.wait)
    log.info("shutting down")
    await broker.stop()
