"""``mqstore lock``: the master lock on ACTIVEMQ_LOCK."""

from __future__ import annotations

import typer

from mqstore.cli.options import DataDirOpt, DsnOpt, PrefixOpt, settings_to_read
from mqstore.cli.output import console, run

lock_app = typer.Typer(
    rich_markup_mode=None, help="The master lock on ACTIVEMQ_LOCK.", no_args_is_help=True
)


@lock_app.command("status")
def lock_status(
    dsn: DsnOpt = None, table_prefix: PrefixOpt = None, data_dir: DataDirOpt = None
) -> None:
    """Who holds the master lock and until when."""

    def body() -> None:
        from mqstore.app import open_database
        from mqstore.lock import describe_lock
        from mqstore.schema import build_schema

        settings = settings_to_read(dsn, table_prefix, data_dir)
        schema = build_schema(settings.table_prefix)
        with open_database(settings, read_only=True) as database, database.engine.connect() as conn:
            status, state = describe_lock(conn, schema)
        console.print(
            f"{schema.lock.name}: {state} (BROKER_NAME={status.broker_name}, TIME={status.time})"
        )

    run(body)
