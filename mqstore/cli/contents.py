"""``mqstore browse`` and ``mqstore stats``: what the store holds, read without a broker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import sqlalchemy as sa
import typer
from rich.table import Table

from mqstore.cli.options import BIGINT_MAX, DataDirOpt, DsnOpt, JsonOpt, PrefixOpt, settings_to_read
from mqstore.cli.output import console, emit, err_console, run
from mqstore.cli.tables import tables_named
from mqstore.errors import ConfigError


def _container(destination: str) -> str:
    """The CONTAINER a user means: ``queue://X``, ``topic://X``, or a name as a STOMP
    client gives it (``/queue/X``, ``/topic/X`` or ``X``, a queue), refused as the broker
    refuses it (``/temp-queue/X``, a wildcard, a composite)."""
    if "://" not in destination:
        from mqstore.broker.frames import FrameError
        from mqstore.broker.messages import container_of

        try:
            return container_of(destination)
        except FrameError as exc:
            raise ConfigError(str(exc)) from None
    if not destination.startswith(("queue://", "topic://")):
        raise ConfigError(
            f"{destination!r} is not a destination: use queue://NAME, topic://NAME, "
            "/queue/NAME, /topic/NAME or NAME"
        )
    return destination


def browse(
    destination: Annotated[
        str,
        typer.Argument(help="queue://NAME, topic://NAME, /queue/NAME, /topic/NAME or NAME"),
    ],
    dsn: DsnOpt = None,
    table_prefix: PrefixOpt = None,
    data_dir: DataDirOpt = None,
    limit: Annotated[
        int, typer.Option(min=1, max=BIGINT_MAX, help="at most this many messages")
    ] = 100,
    as_json: JsonOpt = False,
) -> None:
    """List a destination's stored messages, decoded, in delivery order."""

    def body() -> None:
        from mqstore.app import open_database
        from mqstore.browse import describe, table_row
        from mqstore.store import PostgresStore

        settings = settings_to_read(dsn, table_prefix, data_dir)
        container = _container(destination)
        with open_database(settings, read_only=True) as database:
            store = PostgresStore(
                database.engine,
                prefix=settings.table_prefix,
                prioritized=settings.prioritized_messages,
            )
            with tables_named(database.engine, settings.table_prefix):
                views = [describe(row) for row in store.page(container, None, limit)]
            if not views and container not in store.destinations():
                err_console.print(
                    f"nothing is stored under {container} (`mqstore stats` lists what is)",
                    highlight=False,
                )
        if as_json:
            emit(json.dumps(views, indent=2, ensure_ascii=False))
            return
        table = Table(title=f"{container}: {len(views)} message(s)")
        for col in ("id", "JMS message id", "prio", "timestamp", "properties", "body"):
            table.add_column(col)
        for view in views:
            table.add_row(*table_row(view))
        console.print(table)

    run(body)


def stats(
    dsn: DsnOpt = None,
    table_prefix: PrefixOpt = None,
    data_dir: DataDirOpt = None,
    journal_dir: Annotated[
        Path | None,
        typer.Option(help="the broker's journal [MQSTORE_JOURNAL_DIR]; unset: DATA_DIR/journal"),
    ] = None,
    prioritized_messages: Annotated[
        bool | None,
        typer.Option(
            "--prioritized-messages/--no-prioritized-messages",
            help="the store has ActiveMQ's prioritizedMessages: count each subscription's "
            "backlog per priority [MQSTORE_PRIORITIZED_MESSAGES; default: off]",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Destinations and depths, durable subscriptions and backlog, lock and journal state."""

    def body() -> None:
        from rich.text import Text

        from journal.checkpoint import stored_position
        from journal.support import existing_journal_id
        from mqstore.app import open_database
        from mqstore.lock import describe_lock
        from mqstore.schema import build_schema
        from mqstore.store import PostgresStore

        settings = settings_to_read(
            dsn,
            table_prefix,
            data_dir,
            journal_dir=journal_dir,
            prioritized_messages=prioritized_messages,
        )
        journal_id = existing_journal_id(settings.resolved_journal_dir)
        with open_database(settings, read_only=True) as database:
            store = PostgresStore(
                database.engine,
                prefix=settings.table_prefix,
                prioritized=settings.prioritized_messages,
            )
            with tables_named(database.engine, settings.table_prefix):
                figures = store.stats()
            schema = build_schema(settings.table_prefix)
            with database.engine.connect() as conn:
                lock, lock_state = describe_lock(conn, schema)
                schema_warning = _schema_warning(conn, settings.table_prefix)
                applied = stored_position(conn, schema, journal_id) if journal_id else None
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
            journal["checkpointed_to"] = f"{applied.segment}:{applied.offset}" if applied else None
        data = {
            "destinations": figures.destinations,
            "subscriptions": subscriptions,
            "lock": {
                "holder": lock.broker_name,
                "time": lock.time,
                "journaled": lock.journaled,
                "state": lock_state,
            },
            "journal": journal,
        }
        if schema_warning is not None:  # the figures are shown all the same
            err_console.print(
                f"[yellow]warning:[/yellow] {schema_warning}", highlight=False, soft_wrap=True
            )
        if as_json:
            emit(json.dumps(data, indent=2))
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

    run(body)


def _schema_warning(conn: sa.Connection, prefix: str) -> str | None:
    """What to do about a schema mqstore migrated that is not at this mqstore's head (behind:
    `mqstore db upgrade`; newer: upgrade mqstore), or None. A database only ActiveMQ used
    is read as it is."""
    from mqstore import migrate
    from mqstore.errors import SchemaVersionError

    if migrate.current_revision(conn, prefix) in (None, migrate.head_revision()):
        return None
    try:
        migrate.require_head(conn, prefix)
    except SchemaVersionError as exc:
        return str(exc)
    return None


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
                "problem": str(problem)}  # fmt: skip
    damage = report.problem
    return {
        "directory": str(directory),
        "segments": len(report.segments),
        "records": report.records,
        "problem": (
            f"{damage.kind} at {damage.file} offset {damage.offset} ({damage.reason}; "
            f"{damage.bytes_after} bytes after it): see `mqstore journal repair --dry-run "
            f"{directory}`"
            if damage
            else None
        ),
    }
