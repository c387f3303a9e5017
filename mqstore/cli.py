"""The ``mqstore`` command: database lifecycle, serve, browse, stats, journal and lock tools.

Every flag mirrors a setting (``MQSTORE_<NAME>``); errors a user can cause print one line
that says what to do, never a traceback.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import sqlalchemy as sa
import typer
from rich.console import Console
from rich.table import Table

from mqstore import migrate
from mqstore.db import STATEMENT_ADVICE, sqlstate
from mqstore.errors import ConfigError, MqstoreError, SchemaError
from mqstore.migration_guards import BROKER_PRIVILEGES
from mqstore.settings import Settings, load_settings

T = TypeVar("T")
#: PostgreSQL refusals of a command's statements a user fixes, by SQLSTATE: what to do.
_DATABASE_ADVICE = {
    "42P01": "this database has no mqstore tables for this --table-prefix; run "
    "`mqstore db upgrade` (or `mqstore db adopt` for ActiveMQ's), or give the prefix",
    "42501": "the DSN's role lacks rights on the tables: as their owner run GRANT "
    f"{', '.join(BROKER_PRIVILEGES)} ON ALL TABLES IN SCHEMA <schema> TO <role>, or use "
    "a DSN whose role has them",
    **STATEMENT_ADVICE,
}
#: What to do when the session ended while a command ran (its committed work stays).
_CONNECTION_LOST = (
    "lost the connection to PostgreSQL: the server restarted, an administrator ended the "
    "session, or the network failed; run the command again"
)
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: The largest count an option may give a SQL LIMIT (PostgreSQL's BIGINT).
_BIGINT_MAX = 2**63 - 1


def _output_closed() -> NoReturn:
    """The reader of stdout went away (``mqstore stats | head``): stop quietly with
    128 + SIGPIPE, as a tool the signal ends does. Stdout becomes /dev/null, so Python's
    last flush of it does not complain either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise typer.Exit(128 + signal.SIGPIPE)


class _OutputConsole(Console):
    """A command's output; a closed pipe ends the command as :func:`_output_closed` says
    (rich's own answer is exit code 1, which ``db check`` gives a schema that differs)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        _output_closed()


def _print(text: str) -> None:
    """Print machine-readable output (``--json``)."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _output_closed()


console = _OutputConsole()
err_console = Console(stderr=True)

app = typer.Typer(
    help="mqstore: ActiveMQ-compatible message store on PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(
    help="Create, migrate, check and adopt the database schema.", no_args_is_help=True
)
journal_app = typer.Typer(help="Inspect and repair a local journal.", no_args_is_help=True)
lock_app = typer.Typer(help="The master lock on ACTIVEMQ_LOCK.", no_args_is_help=True)
history_app = typer.Typer(
    help="The message history (MQSTORE_HISTORY): what became of each message.",
    no_args_is_help=True,
)
app.add_typer(db_app, name="db")
app.add_typer(journal_app, name="journal")
app.add_typer(lock_app, name="lock")
app.add_typer(history_app, name="history")

DsnOpt = Annotated[
    str | None,
    typer.Option(
        "--dsn", help="PostgreSQL DSN [MQSTORE_DSN]; unset: embedded PostgreSQL in --data-dir"
    ),
]
PrefixOpt = Annotated[
    str | None, typer.Option("--table-prefix", help="ActiveMQ tablePrefix [MQSTORE_TABLE_PREFIX]")
]
DataDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", help="embedded PostgreSQL and journal [MQSTORE_DATA_DIR]"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def _run(fn: Callable[[], T]) -> T:
    """Run a command body; errors a user can cause become one line on stderr, exit code 2."""
    try:
        return fn()
    except MqstoreError as exc:
        message = str(exc)
    except sa.exc.DBAPIError as exc:
        advice = _DATABASE_ADVICE.get(sqlstate(exc))
        if advice is None and exc.connection_invalidated:
            advice = _CONNECTION_LOST
        if advice is None:
            raise
        message = f"{str(exc.orig).splitlines()[0]}: {advice}"
    except OSError as exc:  # a port in use, a directory that cannot be made, ...
        where = f": {exc.filename}" if exc.filename else ""
        message = f"{exc.strerror or exc}{where}"
    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2) from None


def _settings(dsn: str | None, prefix: str | None, data_dir: Path | None, **more: Any) -> Settings:
    return load_settings(dsn=dsn, table_prefix=prefix, data_dir=data_dir, **more)


def _settings_to_read(
    dsn: str | None, prefix: str | None, data_dir: Path | None, **more: Any
) -> Settings:
    """Settings for a command on an existing store (every one but ``serve`` and ``db
    upgrade``): with no DSN, the embedded store must exist already (it never creates one)."""
    settings = _settings(dsn, prefix, data_dir, **more)
    if settings.dsn is None:
        from mqstore.embedded import store_exists

        if not store_exists(settings.data_dir):
            where = settings.data_dir
            shown = str(where) if where.is_absolute() else f"./{where}"
            raise ConfigError(
                f"no MQSTORE_DSN is set and there is no embedded store in {shown}: pass --dsn "
                "(or set MQSTORE_DSN), or run where the store is (or give its --data-dir); "
                "`mqstore serve` creates one"
            )
    return settings


def _status_table(settings: Settings) -> None:
    from mqstore.app import open_database

    with open_database(settings) as database:
        table = Table(title="mqstore tables")
        for col in ("table", "rows", "detail"):
            table.add_column(col)
        for status in migrate.table_status(database.engine, settings.table_prefix):
            rows = str(status.rows) if status.exists else "missing"
            table.add_row(status.name, rows, status.detail)
        console.print(table)
        with database.engine.connect() as conn:
            revision = migrate.current_revision(conn, settings.table_prefix)
            try:
                migrate.require_head(conn, settings.table_prefix)
                advice = ""
            except SchemaError as exc:  # behind, ahead, missing: what to do about it
                advice = f": {exc}"
        console.print(
            f"schema revision: {revision} (head {migrate.head_revision()}){advice}",
            highlight=False,
            soft_wrap=True,
        )


@db_app.command("upgrade")
def db_upgrade(
    dsn: DsnOpt = None,
    table_prefix: PrefixOpt = None,
    data_dir: DataDirOpt = None,
    revision: Annotated[str, typer.Option(help="target revision")] = "head",
) -> None:
    """Create or migrate mqstore's tables (ActiveMQ-compatible) to REVISION."""

    def body() -> None:
        from mqstore.app import open_database

        settings = _settings(dsn, table_prefix, data_dir)
        with open_database(settings) as database:
            with database.engine.connect() as conn:
                beside = migrate.prefixes_beside(conn, settings.table_prefix)
            migrate.upgrade(database.engine, settings.table_prefix, revision)
            with database.engine.connect() as conn:
                current = migrate.current_revision(conn, settings.table_prefix)
        if current != revision and revision in (*migrate.known_revisions(), "base"):
            console.print(  # alembic does nothing when asked to go back, and says nothing
                f"database is at revision {current}, past {revision}: `mqstore db upgrade` "
                f"never goes back (`mqstore db downgrade {revision}` does)",
                highlight=False,
                soft_wrap=True,
            )
        else:
            console.print(f"database upgraded to revision {current}", highlight=False)
        if beside and current is not None:
            _note_new_prefix(settings.table_prefix, beside)
        _status_table(settings)

    _run(body)


def _note_new_prefix(prefix: str, beside: list[str]) -> None:
    """Say that the upgrade made a new, empty set of tables beside other prefixes' tables."""
    downgrade = f"mqstore db downgrade base --table-prefix {prefix!r} --yes"
    err_console.print(
        migrate.new_prefix_note(prefix, beside, "--table-prefix {}", downgrade),
        highlight=False,
        soft_wrap=True,
    )


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(help="target revision, e.g. base")],
    dsn: DsnOpt = None,
    table_prefix: PrefixOpt = None,
    data_dir: DataDirOpt = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="confirm: a downgrade drops tables and their rows")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="even while a broker holds the master lease")
    ] = False,
) -> None:
    """Migrate down to REVISION (`base` drops the tables and every message in them)."""

    def body() -> None:
        from mqstore.app import open_database

        if not yes:
            raise ConfigError(
                f"downgrading to {revision} drops tables and every row in them "
                "(`base`: all messages): pass --yes to go ahead"
            )
        settings = _settings_to_read(dsn, table_prefix, data_dir)
        with open_database(settings) as database:
            before, after = migrate.downgrade(
                database.engine, settings.table_prefix, revision, force=force
            )
        if before == after:
            console.print(
                f"database is already at revision {after}: nothing was downgraded",
                highlight=False,
            )
        else:
            console.print(f"database downgraded to {revision}")

    _run(body)


@db_app.command("check")
def db_check(
    dsn: DsnOpt = None, table_prefix: PrefixOpt = None, data_dir: DataDirOpt = None
) -> None:
    """Exit 0 only if the database is at head and matches the declared schema."""

    def body() -> None:
        from mqstore.app import open_database

        settings = _settings_to_read(dsn, table_prefix, data_dir)
        with open_database(settings) as database:
            problems = migrate.check(database.engine, settings.table_prefix)
        if problems:
            for problem in problems:
                err_console.print(f"- {problem}", highlight=False, soft_wrap=True)
            raise typer.Exit(1)
        console.print("schema OK: at head, tables match")

    _run(body)


@db_app.command("adopt")
def db_adopt(
    dsn: DsnOpt = None, table_prefix: PrefixOpt = None, data_dir: DataDirOpt = None
) -> None:
    """Take over tables a real ActiveMQ broker created, keeping every row."""

    def body() -> None:
        from mqstore.app import open_database

        settings = _settings_to_read(dsn, table_prefix, data_dir)
        with open_database(settings) as database:
            report = migrate.adopt(database.engine, settings.table_prefix)
        for action in report.actions:
            console.print(f"- {action}", highlight=False)
        console.print("adopted: " + ", ".join(f"{t} {n} rows" for t, n in report.rows.items()))

    _run(body)


@db_app.command("status")
def db_status(
    dsn: DsnOpt = None, table_prefix: PrefixOpt = None, data_dir: DataDirOpt = None
) -> None:
    """Row counts of the ActiveMQ tables, who holds the lock and the schema revision."""
    _run(lambda: _status_table(_settings_to_read(dsn, table_prefix, data_dir)))


@app.command("serve")
def serve(
    dsn: DsnOpt = None,
    table_prefix: PrefixOpt = None,
    data_dir: DataDirOpt = None,
    stomp: Annotated[
        str, typer.Option(help="HOST:PORT to listen on ([::1]:PORT for IPv6; port 0: any free)")
    ] = "127.0.0.1:61613",
    broker_name: Annotated[
        str | None, typer.Option(help="lock holder id [MQSTORE_BROKER_NAME]")
    ] = None,
    journal_dir: Annotated[
        Path | None,
        typer.Option(help="journal directory [MQSTORE_JOURNAL_DIR]; unset: DATA_DIR/journal"),
    ] = None,
    journal: Annotated[
        bool | None,
        typer.Option(
            "--journal/--no-journal",
            help="keep the local journal, or write to the database directly (needed for "
            "shared-database HA) [MQSTORE_JOURNAL; default: journal]",
            show_default=False,
        ),
    ] = None,
    lock: Annotated[str | None, typer.Option(help="lease | row | none [MQSTORE_LOCK]")] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help="serve Prometheus /metrics on this port [MQSTORE_METRICS_PORT]"),
    ] = None,
    metrics_host: Annotated[
        str | None, typer.Option(help="address /metrics listens on [MQSTORE_METRICS_HOST]")
    ] = None,
    users_file: Annotated[
        Path | None,
        typer.Option(help="STOMP logins, login=passcode lines [MQSTORE_USERS_FILE]"),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option(help="PEM certificate: STOMP over TLS only [MQSTORE_TLS_CERT]"),
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option(help="PEM key of --tls-cert [MQSTORE_TLS_KEY]")
    ] = None,
    tls_client_ca: Annotated[
        Path | None,
        typer.Option(help="PEM CAs client certificates must chain to [MQSTORE_TLS_CLIENT_CA]"),
    ] = None,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR")] = "INFO",
) -> None:
    """Run the STOMP broker on the store (embedded PostgreSQL when no DSN is given)."""

    def body() -> None:
        from mqstore.app import serve as run_serve

        if log_level.upper() not in _LOG_LEVELS:
            raise typer.BadParameter(
                f"--log-level must be one of {', '.join(_LOG_LEVELS)}, got {log_level!r}"
            )
        logging.basicConfig(
            level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        settings = _settings(
            dsn,
            table_prefix,
            data_dir,
            broker_name=broker_name,
            journal_dir=journal_dir,
            lock=lock,
            journal=journal,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            users_file=users_file,
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_client_ca=tls_client_ca,
        )
        run_serve(settings, *_listen_address(stomp))

    _run(body)


def _listen_address(stomp: str) -> tuple[str, int]:
    """``--stomp`` as (host, port): ``HOST:PORT``, ``[IPV6]:PORT``."""
    host, _, port = stomp.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not port.isdigit() or int(port) > 65535 or "[" in host or "]" in host:
        raise ConfigError(
            f"--stomp must be HOST:PORT (an IPv6 address in brackets: [::1]:61613) with a "
            f"port from 0 to 65535, got {stomp!r}"
        )
    return host, int(port)


def _container(destination: str) -> str:
    """The CONTAINER a user means: ``queue://X``, ``topic://X``, ``/queue/X``, ``/topic/X``
    or ``X`` (a queue)."""
    for kind in ("queue", "topic"):
        if destination.startswith(f"/{kind}/"):
            return f"{kind}://{destination[len(kind) + 2 :]}"
    if "://" not in destination:
        return f"queue://{destination}"
    if not destination.startswith(("queue://", "topic://")):
        raise ConfigError(
            f"{destination!r} is not a destination: use queue://NAME, topic://NAME, "
            "/queue/NAME, /topic/NAME or NAME"
        )
    return destination


@app.command("browse")
def browse(
    destination: Annotated[
        str,
        typer.Argument(help="queue://NAME, topic://NAME, /queue/NAME, /topic/NAME or NAME"),
    ],
    dsn: DsnOpt = None,
    table_prefix: PrefixOpt = None,
    data_dir: DataDirOpt = None,
    limit: Annotated[
        int, typer.Option(min=1, max=_BIGINT_MAX, help="at most this many messages")
    ] = 100,
    as_json: JsonOpt = False,
) -> None:
    """List a destination's stored messages, decoded, in delivery order."""

    def body() -> None:
        from mqstore.app import open_database
        from mqstore.browse import describe, table_row
        from mqstore.store import PostgresStore

        settings = _settings_to_read(dsn, table_prefix, data_dir)
        container = _container(destination)
        with open_database(settings) as database:
            store = PostgresStore(
                database.engine,
                prefix=settings.table_prefix,
                prioritized=settings.prioritized_messages,
            )
            views = [describe(row) for row in store.page(container, None, limit)]
            if not views and container not in store.destinations():
                err_console.print(
                    f"nothing is stored under {container} (`mqstore stats` lists what is)",
                    highlight=False,
                )
        if as_json:
            _print(json.dumps(views, indent=2, ensure_ascii=False))
            return
        table = Table(title=f"{container}: {len(views)} message(s)")
        for col in ("id", "JMS message id", "prio", "timestamp", "properties", "body"):
            table.add_column(col)
        for view in views:
            table.add_row(*table_row(view))
        console.print(table)

    _run(body)


@app.command("stats")
def stats(
    dsn: DsnOpt = None,
    table_prefix: PrefixOpt = None,
    data_dir: DataDirOpt = None,
    journal_dir: Annotated[
        Path | None,
        typer.Option(help="the broker's journal [MQSTORE_JOURNAL_DIR]; unset: DATA_DIR/journal"),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Destinations and depths, durable subscriptions and backlog, lock and journal state."""

    def body() -> None:
        from rich.text import Text

        from journal.support import existing_journal_id
        from mqstore.app import open_database
        from mqstore.lock import describe_lock
        from mqstore.schema import build_schema
        from mqstore.store import PostgresStore

        settings = _settings_to_read(dsn, table_prefix, data_dir, journal_dir=journal_dir)
        journal_id = existing_journal_id(settings.resolved_journal_dir)
        with open_database(settings) as database:
            store = PostgresStore(
                database.engine,
                prefix=settings.table_prefix,
                prioritized=settings.prioritized_messages,
            )
            figures = store.stats()
            schema = build_schema(settings.table_prefix)
            with database.engine.connect() as conn:
                lock, lock_state = describe_lock(conn, schema)
                applied = None
                # A database only ActiveMQ used (not yet adopted) has no journal table.
                if journal_id and sa.inspect(conn).has_table(schema.journal.name):
                    jt = schema.journal.c
                    applied = conn.execute(
                        sa.select(jt.segment, jt.position).where(jt.journal_id == journal_id)
                    ).first()
        subscriptions = [
            {
                "topic": k.container,
                "client_id": k.client_id,
                "name": k.sub_name,
                "selector": figures.selectors.get(k),
                "backlog": n,
            }
            for k, n in figures.subscriptions.items()
        ]
        journal = _journal_summary(settings.resolved_journal_dir)
        if journal is not None:
            journal["journal_id"] = journal_id
            journal["of_this_database"] = applied is not None
            journal["checkpointed_to"] = (
                f"{applied.segment}:{applied.position}" if applied else None
            )
        data = {
            "destinations": figures.destinations,
            "subscriptions": subscriptions,
            "lock": {"holder": lock.broker_name, "time": lock.time, "state": lock_state},
            "journal": journal,
        }
        if as_json:
            _print(json.dumps(data, indent=2))
            return
        table = Table(title="destinations")
        table.add_column("destination")
        table.add_column("depth", justify="right")
        for name, depth in sorted(figures.destinations.items()):
            table.add_row(name, str(depth))
        console.print(table)
        subs = Table(title="durable subscriptions")
        for col in ("topic", "client id", "name", "selector", "backlog"):
            subs.add_column(col)
        for key, backlog in figures.subscriptions.items():
            selector = figures.selectors.get(key)
            subs.add_row(
                key.container,
                key.client_id,
                key.sub_name,
                Text("(all messages)" if selector is None else selector),  # never markup
                str(backlog),
            )
        console.print(subs)
        console.print(f"lock: {lock_state}")
        if journal is not None:
            applied_to = (
                f"applied to the database up to {journal['checkpointed_to']}"
                if journal["of_this_database"]
                else "not a journal of this database (it has no record of journal "
                f"{journal['journal_id']}; another database's, or a broker never started on it?)"
            )
            console.print(
                f"journal {journal['directory']}: {journal['segments']} segment(s), "
                f"{journal['records']} record(s) kept, {applied_to}"
                + (f", damage: {journal['problem']}" if journal["problem"] else "")
            )

    _run(body)


def _journal_summary(directory: Path) -> dict[str, object] | None:
    """What ``mqstore stats`` says about the local journal, if there is one."""
    if not directory.is_dir():
        return None
    from journal import JournalError, inspect

    try:
        report = inspect(directory)
    except (JournalError, OSError) as exc:  # the database's figures are shown all the same
        problem = f"cannot read {exc.filename}: {exc.strerror}" if isinstance(exc, OSError) else exc
        return {"directory": str(directory), "segments": 0, "records": 0,
                "last_checkpoint": None, "problem": str(problem)}  # fmt: skip
    damage = report.problem
    return {
        "directory": str(directory),
        "segments": len(report.segments),
        "records": report.records,
        "last_checkpoint": str(report.last_checkpoint) if report.last_checkpoint else None,
        "problem": (
            f"{damage.kind} at {damage.file} offset {damage.offset} ({damage.reason}; "
            f"{damage.bytes_after} bytes after it): see `mqstore journal repair --dry-run "
            f"{directory}`"
            if damage
            else None
        ),
    }


@lock_app.command("status")
def lock_status(
    dsn: DsnOpt = None, table_prefix: PrefixOpt = None, data_dir: DataDirOpt = None
) -> None:
    """Who holds the master lock and until when."""

    def body() -> None:
        from mqstore.app import open_database
        from mqstore.lock import describe_lock
        from mqstore.schema import build_schema

        settings = _settings_to_read(dsn, table_prefix, data_dir)
        schema = build_schema(settings.table_prefix)
        with open_database(settings) as database, database.engine.connect() as conn:
            status, state = describe_lock(conn, schema)
        console.print(
            f"{schema.lock.name}: {state} (BROKER_NAME={status.broker_name}, TIME={status.time})"
        )

    _run(body)


#: A journal directory to read: one that does not exist, or a file, is a usage error.
JournalDirArg = Annotated[
    Path,
    typer.Argument(
        help="journal directory (DATA_DIR/journal unless --journal-dir moved it)",
        metavar="DIRECTORY",
        exists=True,
        file_okay=False,
    ),
]


def _require_journal(directory: Path) -> None:
    """Refuse a directory that holds no journal (no segment, id or ``newest`` file), such
    as the data directory the journal is in: read, it looks like an empty, intact journal,
    and a repair would leave its lock file there."""
    from journal.segments import NEWEST_FILE_NAME, list_segments
    from journal.support import ID_FILE

    if list_segments(directory) or any(
        (directory / name).exists() for name in (ID_FILE, NEWEST_FILE_NAME)
    ):
        return
    inside = directory / "journal"
    hint = (
        f"; the journal is in {inside}"
        if inside.is_dir()
        else " (a broker's journal is DATA_DIR/journal, or where --journal-dir put it)"
    )
    raise ConfigError(f"{directory} holds no journal: no *.wal segment and no {ID_FILE}{hint}")


@journal_app.command("inspect")
def journal_inspect(directory: JournalDirArg, as_json: JsonOpt = False) -> None:
    """Segments, record counts by type, checkpoint position and any damage found."""

    def body() -> None:
        from journal import JournalError, inspect

        _require_journal(directory)
        try:
            report = inspect(directory)
        except JournalError as exc:
            raise MqstoreError(str(exc)) from None
        data = report.to_dict()
        if as_json:
            _print(json.dumps(data, indent=2, default=str))
            return
        console.print_json(json.dumps(data, default=str))

    _run(body)


@journal_app.command("repair")
def journal_repair(
    directory: JournalDirArg,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only say what would be lost")] = False,
) -> None:
    """Cut corrupt records out of the journal (padded over, so later ones stay), after
    saying what is lost."""

    def body() -> None:
        from journal import JournalError, repair

        _require_journal(directory)
        try:
            plan = repair(directory, dry_run=True)
            console.print(plan.describe(), highlight=False, soft_wrap=True)
            if not dry_run and plan.problem is not None:  # an intact journal is left alone
                repair(directory, dry_run=False)
                console.print("repaired")
        except JournalError as exc:
            raise MqstoreError(str(exc)) from None

    _run(body)


@journal_app.command("forget")
def journal_forget(
    journal_id: Annotated[
        str, typer.Argument(help="id of the lost journal (as a refusal names it)")
    ],
    dsn: DsnOpt = None,
    table_prefix: PrefixOpt = None,
    data_dir: DataDirOpt = None,
    yes: Annotated[bool, typer.Option("--yes", help="accept the loss")] = False,
) -> None:
    """Accept that a journal left running is lost, with what its broker acknowledged after
    its last checkpoint, so a broker may start on another journal."""

    def body() -> None:
        from journal import runs
        from mqstore.app import open_database
        from mqstore.schema import build_schema

        settings = _settings_to_read(dsn, table_prefix, data_dir)
        schema = build_schema(settings.table_prefix)
        if not yes:
            raise ConfigError(
                f"what journal {journal_id} holds beyond its last checkpoint is then lost for "
                "good; if its directory can still be found, start the broker on it instead. "
                "To accept the loss, rerun with --yes"
            )
        with open_database(settings) as database, database.engine.begin() as conn:
            migrate.require_head(conn, settings.table_prefix)
            if not runs.forget(conn, schema, journal_id):
                raise ConfigError(
                    f"{schema.journal.name} has no journal {journal_id!r} left running: "
                    "nothing to forget"
                )
        console.print(f"journal {journal_id} forgotten: a broker may start on another journal")

    _run(body)


@history_app.command("trim")
def history_trim(
    dsn: DsnOpt = None,
    table_prefix: PrefixOpt = None,
    data_dir: DataDirOpt = None,
    older_than_days: Annotated[
        float | None,
        typer.Option(
            min=0, help="trim rows removed more than N days ago [MQSTORE_HISTORY_RETENTION_DAYS]"
        ),
    ] = None,
    exported: Annotated[
        Path | None,
        typer.Option(help="trim only rows this `mqstore export --out` directory has archived"),
    ] = None,
    batch: Annotated[
        int, typer.Option(min=1, max=_BIGINT_MAX, help="rows deleted per transaction")
    ] = 10_000,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="count, delete nothing")] = False,
) -> None:
    """Delete old history rows, in short transactions (safe beside a running broker)."""

    def body() -> None:
        from rich.progress import Progress

        from mqstore.app import open_database
        from mqstore.archive import database_identity, exported_history_bound
        from mqstore.store.history import MAX_HIST_ID, TrimBound, count_trimmable, trim_history

        settings = _settings_to_read(
            dsn, table_prefix, data_dir, history_retention_days=older_than_days
        )
        days = settings.history_retention_days
        if days <= 0 and exported is None:
            raise ConfigError(
                "say which history rows to trim: --older-than-days N, --exported DIR "
                "(rows a Spark export has archived), or both"
            )
        bound = TrimBound(before_ms=2**63 - 1, upto_hist_id=MAX_HIST_ID)
        if days > 0:
            bound = bound.narrowed(TrimBound.older_than(days))
        with open_database(settings) as database:
            with database.engine.connect() as conn:  # a newer mqstore may mean other rows
                migrate.require_head(conn, settings.table_prefix)
            if exported is not None:  # an export of this very database and prefix only
                with database.engine.connect() as conn:
                    identity = database_identity(conn)
                archived = exported_history_bound(exported, settings.table_prefix, identity)
                bound = bound.narrowed(TrimBound(*archived))
            total = count_trimmable(database.engine, settings.table_prefix, bound)
            if dry_run:
                console.print(f"would delete {total} history row(s)")
                return
            with Progress(console=err_console, transient=True) as bar:
                task = bar.add_task("trimming history", total=total)
                n = trim_history(
                    database.engine,
                    settings.table_prefix,
                    bound,
                    batch=batch,
                    progress=lambda rows: bar.advance(task, rows),
                )
        console.print(f"deleted {n} history row(s)")

    _run(body)


def _register_spark() -> None:
    try:
        from spark_etl.cli import register
    except ImportError:  # the spark extra's CLI is optional
        return
    register(app)


_register_spark()


#: What the ``spark`` extra installs for ``mqstore export`` and ``audit`` to import.
_SPARK_EXTRA_MODULES = ("pyspark", "py4j", "pyarrow", "pandas")


def _terminated(signum: int, _frame: object) -> None:
    """SIGTERM (a supervisor, ``kill``, ``timeout``) or SIGHUP (the terminal closed) ends a
    command as Ctrl-C does: through its cleanup, so an embedded server it started is stopped
    (``serve`` stops gracefully)."""
    raise SystemExit(128 + signum)


def main() -> None:
    """Console entry point."""
    from mqstore.embedded.server import stop_signals

    for signum in stop_signals():
        if signum != signal.SIGINT:  # that is Python's KeyboardInterrupt: exit 130 below
            signal.signal(signum, _terminated)
    try:
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # ignored stays ignored
            # From here Ctrl-C is a KeyboardInterrupt, for the command's cleanup (the entry
            # point answered it at once while the modules were imported).
            signal.signal(signal.SIGINT, signal.default_int_handler)
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except ModuleNotFoundError as exc:  # a Spark job run without the spark extra
        if (exc.name or "").split(".")[0] not in _SPARK_EXTRA_MODULES:
            raise
        err_console.print(
            "[red]error:[/red] PySpark is not installed: pip install 'mqstore\\[spark]'",
            highlight=False,
        )
        sys.exit(1)  # the Spark jobs' code for what a user gets wrong


if __name__ == "__main__":
    main()
