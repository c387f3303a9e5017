"""``mqstore journal``: inspect and repair a local journal, or forget a lost one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mqstore import migrate
from mqstore.cli.options import DataDirOpt, DsnOpt, JsonOpt, PrefixOpt, settings_to_read
from mqstore.cli.output import console, emit, err_console, run
from mqstore.errors import ConfigError, MqstoreError

if TYPE_CHECKING:
    from journal.format import Position

journal_app = typer.Typer(
    rich_markup_mode=None, help="Inspect and repair a local journal.", no_args_is_help=True
)


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


#: Where the checkpoint position lives: the journal directory does not hold it.
CHECKPOINT_NOTE = (
    "checkpoint position: kept in the database (MQSTORE_JOURNAL), not in this directory; "
    "`mqstore stats` shows how far the database applied this journal"
)


#: ``journal inspect``'s exit code when it found damage (a torn tail start-up would cut,
#: corruption it refuses, missing segments); 0 means none, 2 that it could not read.
DAMAGE_FOUND = 1


@journal_app.command("inspect")
def journal_inspect(directory: JournalDirArg, as_json: JsonOpt = False) -> None:
    """Segments, record and operation counts by type, and any damage found (the checkpoint
    position is kept in the database: `mqstore stats` shows it).

    Exit codes: 0 no damage (zeros after the last record are the writer's free space), 1
    damage found (reported, also with --json), 2 the journal could not be read.
    """

    def body() -> None:
        from journal import JournalError, inspect

        _require_journal(directory)
        try:
            report = inspect(directory)
        except JournalError as exc:
            raise MqstoreError(str(exc)) from None
        data = report.to_dict()
        # Checkpoints store their position in the database, not as a record in the log.
        for key in ("last_checkpoint", "last_checkpoint_record"):
            data.pop(key, None)
        if as_json:
            emit(json.dumps(data, indent=2, default=str))
        else:
            for line in _inspect_lines(data):
                console.print(line, highlight=False, soft_wrap=True)
        if data["problem"] is not None:
            raise typer.Exit(DAMAGE_FOUND)

    run(body)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items())) or "none"


def _inspect_lines(data: dict[str, Any]) -> list[str]:
    """What ``journal inspect`` prints without ``--json``."""
    segments = data["segments"]
    end = f", valid data ends at {data['end']}" if data["end"] else ""
    lines = [f"journal {data['directory']}: {len(segments)} segment(s), "
             f"{data['records']} record(s){end}"]  # fmt: skip
    for seg in segments:
        records = "not read" if seg["records"] is None else f"{seg['records']} record(s)"
        lines.append(f"  {seg['file']}: {seg['size']} bytes, {records}")
    lines.append(f"records by type: {_counts(data['records_by_type'])}")
    lines.append(f"operations by type: {_counts(data['ops_by_type'])}")
    problem = data["problem"]
    if problem is None:
        lines.append("damage: none")
    else:
        lines.append(
            f"damage: {problem['kind']} at {problem['file']} offset {problem['offset']} "
            f"({problem['reason']}; {problem['bytes_after']} bytes after it): see "
            f"`mqstore journal repair --dry-run {data['directory']}`"
        )
    lines.append(CHECKPOINT_NOTE)
    return lines


@journal_app.command("repair")
def journal_repair(
    directory: JournalDirArg,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only say what would be lost")] = False,
    dsn: DsnOpt = None,
    table_prefix: PrefixOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Cut corrupt records out of the journal (padded over, so later ones stay), after
    saying what is lost. With the database at hand (--dsn, MQSTORE_DSN or the embedded
    store), damage its checkpoint has applied already is said to lose nothing."""

    def body() -> None:
        from journal import JournalError, repair

        _require_journal(directory)
        try:
            plan = repair(directory, dry_run=True)
            if plan.problem is not None:
                applied = _applied_position(directory, dsn, table_prefix, data_dir)
                # an intact journal is left alone
                plan = repair(directory, dry_run=dry_run, database_position=applied)
            console.print(plan.describe(), highlight=False, soft_wrap=True)
            if plan.applied:
                console.print("repaired")
        except JournalError as exc:
            raise MqstoreError(str(exc)) from None

    run(body)


def _applied_position(
    directory: Path, dsn: str | None, prefix: str | None, data_dir: Path | None
) -> Position | None:
    """The checkpoint position the database holds for the journal in ``directory``, or None
    (said on stderr) when it cannot be read: repair then counts every damaged record lost."""
    import sqlalchemy as sa

    from journal.checkpoint import stored_position
    from journal.support import existing_journal_id
    from mqstore.app import open_database
    from mqstore.schema import build_schema

    journal_id = existing_journal_id(directory)
    if journal_id is None:
        return None
    try:
        settings = settings_to_read(dsn, prefix, data_dir)
        schema = build_schema(settings.table_prefix)
        with open_database(settings) as database, database.engine.connect() as conn:
            return stored_position(conn, schema, journal_id)
    except (MqstoreError, sa.exc.SQLAlchemyError) as exc:
        err_console.print(
            f"[yellow]note:[/yellow] the database's checkpoint position for journal "
            f"{journal_id} was not read ({_first_line(exc)}); what the repair drops is counted "
            "as lost, though the database may hold it already: pass --dsn to tell",
            highlight=False,
            soft_wrap=True,
        )
        return None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


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
        from mqstore.lock.exclusive import free_kept_lease
        from mqstore.schema import build_schema

        settings = settings_to_read(dsn, table_prefix, data_dir)
        schema = build_schema(settings.table_prefix)
        if not yes:
            raise ConfigError(
                f"what journal {journal_id} holds beyond its last checkpoint is then lost for "
                "good; if its directory can still be found, start the broker on it instead. "
                "To accept the loss, rerun with --yes"
            )
        with open_database(settings) as database, database.engine.begin() as conn:
            migrate.require_head(conn, settings.table_prefix)
            lost = next(
                (j for j in runs.unfinished(conn, schema, "") if j.journal_id == journal_id),
                None,
            )
            if not runs.forget(conn, schema, journal_id):
                raise ConfigError(
                    f"{schema.journal.name} has no journal {journal_id!r} left running: "
                    "nothing to forget"
                )
            holder = lost.broker_name if lost is not None else None
            freed = free_kept_lease(conn, schema, holder)
        console.print(f"journal {journal_id} forgotten: a broker may start on another journal")
        if freed:
            console.print(
                f"the lease on {schema.lock.name} that broker {holder} kept for it "
                "is free: a standby may take it"
            )

    run(body)
