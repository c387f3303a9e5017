"""``mqstore lock``: the master lock on ACTIVEMQ_LOCK."""

from __future__ import annotations

import typer

from mqstore.cli.options import DataDirOpt, DsnOpt, PrefixOpt, settings_to_read
from mqstore.cli.output import console, run
from mqstore.cli.tables import tables_named

lock_app = typer.Typer(
    rich_markup_mode=None, help="The master lock on ACTIVEMQ_LOCK.", no_args_is_help=True
)


@lock_app.command("status")
def lock_status(
    dsn: DsnOpt = None, table_prefix: PrefixOpt = None, data_dir: DataDirOpt = None
) -> None:
    """Who holds the master lock and until when."""

    def body() -> None:
        from journal import runs
        from mqstore.app import open_database
        from mqstore.lock import describe_lock, journal_kept_advice
        from mqstore.schema import build_schema

        settings = settings_to_read(dsn, table_prefix, data_dir)
        schema = build_schema(settings.table_prefix)
        left: list[runs.UnfinishedJournal] = []
        with (
            open_database(settings, read_only=True) as database,
            tables_named(database.engine, settings.table_prefix),
            database.engine.connect() as conn,
        ):
            status, state = describe_lock(conn, schema)
            if status.journaled:
                left = [
                    j
                    for j in runs.unfinished(conn, schema, other_than="")
                    if j.broker_name == status.broker_name
                ]
        console.print(
            f"{schema.lock.name}: {state} (BROKER_NAME={status.broker_name}, "
            f"TIME={status.stored_time})",
            highlight=False,
            soft_wrap=True,
        )
        for journal in left:
            console.print(
                f"  {journal.describe()}: not stopped cleanly", highlight=False, soft_wrap=True
            )
        if status.journaled:
            console.print(
                f"  {journal_kept_advice(status.broker_name)}", highlight=False, soft_wrap=True
            )

    run(body)
