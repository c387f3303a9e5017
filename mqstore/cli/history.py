"""``mqstore history``: the message history (MQSTORE_HISTORY) and its trimming."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mqstore import migrate
from mqstore.cli.options import BIGINT_MAX, DataDirOpt, DsnOpt, PrefixOpt, settings_to_read
from mqstore.cli.output import console, err_console, run
from mqstore.errors import ConfigError

history_app = typer.Typer(
    rich_markup_mode=None,
    help="The message history (MQSTORE_HISTORY): what became of each message.",
    no_args_is_help=True,
)


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
        int, typer.Option(min=1, max=BIGINT_MAX, help="rows deleted per transaction")
    ] = 10_000,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="count, delete nothing")] = False,
) -> None:
    """Delete old history rows, in short transactions (safe beside a running broker)."""

    def body() -> None:
        from rich.progress import Progress

        from mqstore.app import open_database
        from mqstore.archive import database_identity, exported_history_bound
        from mqstore.store.history import MAX_HIST_ID, TrimBound, count_trimmable, trim_history

        settings = settings_to_read(
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
        with open_database(settings, read_only=dry_run) as database:
            with database.engine.connect() as conn:  # a newer mqstore may mean other rows
                migrate.require_head(conn, settings.table_prefix, read_only=dry_run)
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

    run(body)
