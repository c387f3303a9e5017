"""``mqstore db``: create, migrate, check and adopt the database schema."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from sqlalchemy.engine import Engine

from mqstore import migrate, takeover
from mqstore.cli.options import (
    DataDirOpt,
    DsnOpt,
    PrefixOpt,
    command_settings,
    settings_to_read,
)
from mqstore.cli.output import console, err_console, run
from mqstore.errors import ConfigError, SchemaError
from mqstore.settings import Settings

db_app = typer.Typer(
    rich_markup_mode=None,
    help="Create, migrate, check and adopt the database schema.",
    no_args_is_help=True,
)


def _status_table(settings: Settings) -> None:
    from mqstore.app import open_database

    with open_database(settings, read_only=True) as database:
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

        settings = command_settings(dsn, table_prefix, data_dir)
        with open_database(settings) as database:
            with database.engine.connect() as conn:
                beside = migrate.prefixes_beside(conn, settings.table_prefix)
            migrate.upgrade(database.engine, settings.table_prefix, revision)
            with database.engine.connect() as conn:
                current = migrate.current_revision(conn, settings.table_prefix)
            drift = _drift(database.engine, settings.table_prefix) if current else []
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
        if drift and current == migrate.head_revision():
            raise SchemaError(migrate.drift_advice(settings.table_prefix, drift))
        _status_table(settings)

    run(body)


def _drift(engine: Engine, prefix: str) -> list[str]:
    """How the tables differ from what the head revision declares."""
    with engine.connect() as conn:
        return migrate.schema_differences(conn, prefix)


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
        bool,
        typer.Option(
            "--force",
            help="go ahead under a lease whose holder is gone: its guard session is not "
            "connected and it renews nothing while watched for MQSTORE_RENEW_MS plus a "
            "second (never while a broker runs, never under a held row lock)",
        ),
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
        settings = settings_to_read(dsn, table_prefix, data_dir)
        with open_database(settings) as database:
            before, after = migrate.downgrade(
                database.engine,
                settings.table_prefix,
                revision,
                force=force,
                renew_ms=settings.renew_ms,
                note=lambda line: err_console.print(line, highlight=False, soft_wrap=True),
            )
        if before == after:
            console.print(
                f"database is already at revision {after}: nothing was downgraded",
                highlight=False,
            )
        else:
            console.print(f"database downgraded to {revision}")

    run(body)


@db_app.command("check")
def db_check(
    dsn: DsnOpt = None, table_prefix: PrefixOpt = None, data_dir: DataDirOpt = None
) -> None:
    """Exit 0 only if the database is at head and matches the declared schema."""

    def body() -> None:
        from mqstore.app import open_database

        settings = settings_to_read(dsn, table_prefix, data_dir)
        with open_database(settings, read_only=True) as database:
            problems = migrate.check(database.engine, settings.table_prefix)
            with database.engine.connect() as conn:
                current = migrate.current_revision(conn, settings.table_prefix)
                no_schema = migrate.no_schema_error(conn) is not None
            drift = [] if no_schema else _drift(database.engine, settings.table_prefix)
        if problems:
            for problem in problems:
                err_console.print(f"- {problem}", highlight=False, soft_wrap=True)
            advice = None  # at head no migration mends them; behind, the first line's command
            if drift and current == migrate.head_revision():
                advice = migrate.drift_advice(settings.table_prefix)
            elif drift and (current is None or current in migrate.known_revisions()):
                advice = migrate.behind_advice(settings.table_prefix)
            if advice is not None:
                err_console.print(advice, highlight=False, soft_wrap=True)
            raise typer.Exit(1)
        console.print("schema OK: at head, tables match")

    run(body)


@db_app.command("adopt")
def db_adopt(
    dsn: DsnOpt = None, table_prefix: PrefixOpt = None, data_dir: DataDirOpt = None
) -> None:
    """Take over tables a real ActiveMQ broker created, keeping every row."""

    def body() -> None:
        from mqstore.app import open_database

        settings = settings_to_read(dsn, table_prefix, data_dir)
        with open_database(settings) as database:
            with database.engine.connect() as conn:  # adopting one part of a split set
                migrate.refuse_split_schema(conn, settings.table_prefix)
            report = takeover.adopt(database.engine, settings.table_prefix)
        for action in report.actions:
            console.print(f"- {action}", highlight=False)
        console.print("adopted: " + ", ".join(f"{t} {n} rows" for t, n in report.rows.items()))

    run(body)


@db_app.command("status")
def db_status(
    dsn: DsnOpt = None, table_prefix: PrefixOpt = None, data_dir: DataDirOpt = None
) -> None:
    """Row counts of the ActiveMQ tables, who holds the lock and the schema revision."""
    run(lambda: _status_table(settings_to_read(dsn, table_prefix, data_dir)))
