"""Load: incremental, idempotent export of messages and their history to Parquet.

Layout under ``out_dir``::

    messages/destination=…/date=…/*.parquet   every message seen, decoded (append-only)
    history/destination=…/date=…/*.parquet    what became of messages (append-only)
    _snapshots/<run>/                          ids stored at the last run (current messages)
    _watermarks.json                           what has been exported, and from which
                                               database and table prefix; written last
    .lock                                      flock'ed by the run writing the directory

Rows carry the full CONTAINER in ``container``; the ``destination`` partition value is the
CONTAINER, or for a name too long for a directory a shortened one (:mod:`.layout`). Read
the datasets with :func:`read_dataset`: it also fills ``container`` for files written
before format 2, whose partition value is always the full name.

A run writes everything into ``_staging/<run>/``, moves the files into place (their names
carry the run id), writes ``_watermarks.json`` atomically, then cleans up. A run that dies
before the watermarks are written is undone by the next run, so re-running after a crash,
or twice in a row, neither duplicates nor skips rows. A run holds an exclusive ``flock`` on
``.lock`` throughout, so a second run into the same directory refuses at once.

The watermarks are those of one database and table prefix (:mod:`mqstore.archive`): a run
refuses a directory written for another one, and a directory with exported Parquet files
but no readable watermarks (continuing would export everything again). Watermarks written
before the database was recorded (format 1 and 2) are checked against the database before
they are trusted: every row at or below them that the database still holds must be in the
archive, or exported by this run.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.types import StringType

from mqstore.archive import DATABASE_KEY, Identity, has_identity

from .archive_guard import (
    STAGING,
    WATERMARKS,
    ArchiveError,
    check_archive,
    committed_files,
    load_watermarks,
    unwritable,
)
from .decode import with_decoded
from .durable import fsync_all, fsync_path, fsync_tree, write_atomically
from .history import (
    DEFAULT_WINDOW,
    HISTORY_COLUMNS,
    ROW_KEY,
    derive_removals,
    fetch_late_rows,
    match_rows,
    read_history,
)
from .layout import ESCAPED, MAX_VALUE_BYTES, PARTITION_COLUMN, partition_value
from .sources import (
    SNAPSHOT_COLUMNS,
    JdbcSource,
    inspect_database,
    jdbc_source,
    read_msg_index,
    read_msgs,
    read_query,
    table_exists,
)

SNAPSHOTS = "_snapshots"
LOCK_FILE = ".lock"
#: 3: the watermarks name their database (``database``); 2: rows carry ``container``,
#: long names get a shortened ``destination`` (1: neither).
FORMAT_VERSION = 3
#: Steps reported to a progress callback, in order.
STEPS = (
    "recover",
    "snapshot",
    "messages",
    "history",
    "publish",
)

Progress = Callable[[str], None]
#: Parquet writer options for the files that hold message bodies (MSG and its text):
#: no dictionary encoding (hashing big, mostly unique values into a dictionary that overflows
#: anyway costs ~10% of the write) and no min/max statistics (useless for bodies, and each
#: new extreme is a copy of a body) for those two columns; and the row group's and the page's
#: size checked from the first row instead of the 100th, which with 4 MiB messages meant
#: 400 MiB buffered per open file before the writer first looked.
_BODY_WRITER_OPTIONS = {
    **{f"parquet.enable.dictionary#{col}": "false" for col in ("msg", "text")},
    **{f"parquet.column.statistics.enabled#{col}": "false" for col in ("msg", "text")},
    "parquet.page.size.row.check.min": "1",
}
#: Java regex matching one character that Spark escapes in a partition directory name.
_ESCAPED_CLASS = "[" + "".join(f"\\u{ord(ch):04x}" for ch in sorted(ESCAPED)) + "]"
_shorten = sf.udf(partition_value, StringType(), useArrow=True)
#: Epoch ms of the first and the last instant of the years 1 to 9999 (the dates that
#: Python's ``datetime.date``, and so PySpark's and pandas' readers, can hold).
_FIRST_DAY_MS, _LAST_DAY_MS = -62_135_596_800_000, 253_402_300_799_999
#: ``ACTIVEMQ_MSGS`` as the JDBC reads give it (for an empty set of messages).
_MSGS_SCHEMA = (
    "id bigint, container string, msgid_prod string, msgid_seq bigint, expiration bigint, "
    "msg binary, priority bigint, xid string"
)
#: Where :func:`export` logs what the user should know but that does not stop the run.
log = logging.getLogger(__name__)


@dataclass
class ExportResult:
    """What one run exported."""

    run_id: str
    messages: dict[str, int] = field(default_factory=dict)
    history: dict[str, int] = field(default_factory=dict)
    watermarks: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    #: What the run warned about (also logged as warnings of ``spark_etl.export``).
    warnings: list[str] = field(default_factory=list)

    @property
    def message_rows(self) -> int:
        """Message rows added by this run."""
        return sum(self.messages.values())

    @property
    def history_rows(self) -> int:
        """History rows added by this run."""
        return sum(self.history.values())


@dataclass(frozen=True)
class ExportLock:
    """The exclusive lock on an export directory (see :func:`export_lock`)."""

    directory: Path


@contextmanager
def export_lock(out_dir: str | os.PathLike[str]) -> Iterator[ExportLock]:
    """Hold ``out_dir/.lock`` (``flock``, exclusive; the directory is created), or raise
    :class:`ArchiveError` at once when another export holds it. Pass the lock to
    :func:`export` to take it before a SparkSession starts (as ``mqstore export`` does)."""
    out = Path(out_dir).resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ArchiveError(unwritable(out, exc)) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ArchiveError(
                f"another export is writing {out}: let it finish, then run again"
            ) from None
        yield ExportLock(out)
    finally:
        os.close(fd)  # releases the lock


def _write_watermarks(out_dir: Path, marks: dict[str, Any]) -> None:
    write_atomically(out_dir / WATERMARKS, json.dumps(marks, indent=2, sort_keys=True))


def _tagged_files(root: Path, run_id: str) -> list[Path]:
    return [p for p in root.rglob(f"r{run_id}-*") if p.is_file()] if root.exists() else []


def recover(out_dir: Path, marks: dict[str, Any]) -> list[str]:
    """Undo runs that died before committing; returns their run ids."""
    undone: list[str] = []
    committed = marks.get("run_id")
    staging = out_dir / STAGING
    for run_dir in sorted(staging.iterdir()) if staging.exists() else []:
        run_id = run_dir.name
        if run_id != committed:
            for dataset in ("messages", "history"):
                for path in _tagged_files(out_dir / dataset, run_id):
                    path.unlink()
            undone.append(run_id)
        shutil.rmtree(run_dir, ignore_errors=True)
    keep = marks.get("snapshot")
    snaps = out_dir / SNAPSHOTS
    for snap in snaps.iterdir() if snaps.exists() else []:
        if snap.name != keep:
            shutil.rmtree(snap, ignore_errors=True)
    return undone


def _escaped_size(name: Column) -> Column:
    """:func:`.layout.escaped_size` as a native expression (every escaped character is ASCII)."""
    escaped = sf.char_length(name) - sf.char_length(sf.regexp_replace(name, _ESCAPED_CLASS, ""))
    return sf.octet_length(name) + 2 * escaped


def destination_column(container: Column) -> Column:
    """:func:`.layout.partition_value` of ``container``: native for names that fit; only
    the others reach the Python UDF (which Spark calls for every row, even in a CASE)."""
    may_not_fit = sf.octet_length(container) * 3 > MAX_VALUE_BYTES  # escaping at most triples
    too_long = sf.when(may_not_fit & (_escaped_size(container) > MAX_VALUE_BYTES), container)
    return sf.coalesce(_shorten(too_long), container)


def _partitioned(rows: DataFrame, day: Column) -> DataFrame:
    """``rows`` (with ``container``) plus the ``destination`` and ``date`` partition columns."""
    return rows.withColumn(PARTITION_COLUMN, destination_column(sf.col("container"))).withColumn(
        "date", sf.to_date(day)
    )


def message_rows(msgs: DataFrame, keep_msg: bool = True) -> DataFrame:
    """Decoded message rows with the ``destination``/``date`` partition columns (pure);
    ``date`` is null without a JMS timestamp or for one outside years 1 to 9999 (the
    producer's client sets it: Spark fails on a value no timestamp holds)."""
    decoded = with_decoded(msgs, keep_msg=keep_msg)
    stamp = sf.col("timestamp")
    known = (stamp != 0) & stamp.between(_FIRST_DAY_MS, _LAST_DAY_MS)
    return _partitioned(decoded, sf.when(known, sf.timestamp_millis(stamp)))


def history_rows(history: DataFrame, keep_msg: bool = True) -> DataFrame:
    """History rows with the ``destination``/``date`` partition columns (pure); without
    ``keep_msg`` the raw ``MSG`` bytes are left out."""
    columns = [c for c in HISTORY_COLUMNS if keep_msg or c != "msg"]
    return _partitioned(history.select(*columns), sf.timestamp_millis(sf.col("removed_at")))


def read_dataset(spark: SparkSession, path: str | os.PathLike[str]) -> DataFrame:
    """An exported dataset (``messages`` or ``history``) with the full name in ``container``
    and ``date`` typed date (Spark infers no type from null partitions alone).

    Files of format 1 have no ``container`` (their ``destination`` is the full name): the
    schemas are merged and ``container`` falls back to ``destination``. Files of a run
    that has not committed (it died, or is still running) are left out.
    """
    reader = spark.read.option("mergeSchema", "true")
    files = committed_files(Path(path))
    if files is None:
        df = reader.parquet(str(path))
    elif files:
        df = reader.option("basePath", str(path)).parquet(*map(str, files))
    else:
        df = reader.parquet(str(path)).limit(0)
    full = sf.col(PARTITION_COLUMN)
    if "container" in df.columns:
        full = sf.coalesce(sf.col("container"), full)
    if "date" in df.columns:  # void when every row is in the null partition (no timestamp)
        df = df.withColumn("date", sf.col("date").cast("date"))
    return df.withColumn("container", full)


def _move_tagged(src_root: Path, dst_root: Path, run_id: str) -> None:
    """Move the Parquet files of a staged dataset into place, tagging names with the run,
    and make them durable there (before the watermarks name them)."""
    if not src_root.exists():
        return
    moved: list[Path] = []
    for path in sorted(src_root.rglob("*.parquet")):
        target = dst_root / path.parent.relative_to(src_root) / f"r{run_id}-{path.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
        moved.append(target)
    if moved:
        fsync_all([*moved, *{p.parent for p in moved}, dst_root])


def _counts(spark: SparkSession, path: Path) -> dict[str, int]:
    if not any(path.rglob("*.parquet")):
        return {}
    rows = read_dataset(spark, path).groupBy("container").count().collect()
    return {str(r["container"]): int(r["count"]) for r in rows}


def _new_messages(
    spark: SparkSession,
    src: JdbcSource,
    snapshot: DataFrame,
    prev: DataFrame | None,
    marks: dict[str, Any],
    out: Path,
) -> tuple[DataFrame, int | None]:
    """Rows above the watermark up to the snapshot's MAX(ID), plus late rows below it.

    A late row is one at or below the watermark that this snapshot holds, the previous
    one did not, and the previous run did not export (it may have been read after its
    snapshot): a late commit, or a new message under an ID the broker reused after a
    restart (rows are told apart by :data:`.history.ROW_KEY`). No join with the big
    table: only the few late ids are fetched.
    """
    mark = marks.get("msgs_max_id")
    top = snapshot.agg(sf.max("id")).first()
    upto = None if top is None or top[0] is None else int(top[0])
    main = read_msgs(spark, src, after=mark, upto=upto)
    if upto is None:  # nothing in the snapshot: a row committed since waits for the next run
        main = main.limit(0)
    new_mark = max((x for x in (mark, upto) if x is not None), default=None)
    if mark is None:
        return main, new_mark
    below = snapshot.where(sf.col("id") <= mark)
    if prev is None:  # the last snapshot is gone: what the archive lacks is late
        archived = _archived_keys(spark, out / "messages")
        late = below if archived is None else match_rows(below, archived, "left_anti")
        keys = _ids(late)
    else:
        late = match_rows(below, prev, "left_anti")
        keys = _ids(late)
        last_run = _run_files(out / "messages", marks.get("run_id"))
        if keys and last_run:
            done = spark.read.parquet(*last_run).where(sf.col("id").isin(list(keys)))
            keys = _ids(match_rows(late, done, "left_anti"))
    extra = fetch_late_rows(spark, src, "ACTIVEMQ_MSGS", "id", sorted(keys))
    return (main if extra is None else main.unionByName(extra.select(*main.columns))), new_mark


def _ids(rows: DataFrame) -> set[int]:
    """The IDs of ``rows`` (a few late ones: collected to the driver)."""
    return {int(r["id"]) for r in rows.select("id").collect()}


def _archived_keys(spark: SparkSession, messages: Path) -> DataFrame | None:
    """The :data:`.history.ROW_KEY` of every committed message row (None: no files)."""
    if not any(messages.rglob("*.parquet")):
        return None
    return read_dataset(spark, messages).select(*ROW_KEY)


def _missing_snapshot(snap_dir: Path, has_history: bool) -> str | None:
    """What a last run's snapshot deleted by hand costs this run (None: nothing)."""
    if has_history:  # history comes from mqstore_history; late rows from the archive
        return None
    return (
        f"the last run's snapshot {snap_dir} is missing (deleted?): messages removed from "
        "the database since that run get no history rows ('removed') in this run; new "
        "messages are exported as usual, and this run writes a new snapshot"
    )


def _stored_at_last_run(
    spark: SparkSession, prev_snapshot: DataFrame, out: Path, marks: dict[str, Any]
) -> DataFrame:
    """The rows the last run saw stored: its snapshot, plus the rows its read exported that
    committed after the snapshot was taken (:data:`.sources.SNAPSHOT_COLUMNS`). Without
    them, such a row removed before this run's snapshot would leave no history row."""
    last_run = _run_files(out / "messages", marks.get("run_id"))
    if not last_run:
        return prev_snapshot
    exported = spark.read.parquet(*last_run)
    if "container" not in exported.columns:  # format 1 (before ``container``)
        return prev_snapshot
    columns = [
        sf.col("store_priority" if c == "priority" else c).alias(c) for c in SNAPSHOT_COLUMNS
    ]
    after_snapshot = match_rows(exported.select(*columns), prev_snapshot, "left_anti")
    return prev_snapshot.unionByName(after_snapshot)


def _removed_before_adoption(
    spark: SparkSession,
    prev_snapshot: DataFrame,
    snapshot: DataFrame,
    hist: DataFrame,
    out: Path,
    marks: dict[str, Any],
    now: int,
) -> DataFrame:
    """Removals the first run reading ``mqstore_history`` finds only by comparing snapshots:
    the last run compared snapshots (plain ActiveMQ), and the messages ActiveMQ removed
    before mqstore adopted the tables left no history row. Removals ``hist`` (this run's
    ``mqstore_history`` rows) records are left out (on :data:`.history.ROW_KEY`)."""
    stored = _stored_at_last_run(spark, prev_snapshot, out, marks)
    return match_rows(derive_removals(stored, snapshot, now), hist, "left_anti")


def _run_files(root: Path, run_id: str | None) -> list[str]:
    return [str(p) for p in _tagged_files(root, run_id)] if run_id else []


def export(
    spark: SparkSession,
    dsn: str,
    out_dir: str | os.PathLike[str],
    prefix: str = "",
    *,
    history_window: int = DEFAULT_WINDOW,
    keep_msg: bool = True,
    progress: Progress | None = None,
    now_ms: int | None = None,
    lock: ExportLock | None = None,
) -> ExportResult:
    """Export new messages and history from the store at ``dsn`` into ``out_dir``.

    ``keep_msg`` keeps the raw ``MSG`` bytes next to the decoded columns. ``progress``
    is called with each name of :data:`STEPS` as it starts. Returns rows per destination
    (full CONTAINER names). The run holds :func:`export_lock` (or ``lock``, already held)
    throughout. Raises :class:`ArchiveError` when ``out_dir`` must not be written
    (:func:`check_archive`) or another export holds it, :class:`.SourceError`
    for a DSN or tables it cannot use and
    :class:`mqstore.errors.DatabaseUnavailableError` when the database cannot be reached.
    """
    started = time.monotonic()
    identity = inspect_database(dsn, prefix, ("ACTIVEMQ_MSGS",))
    out = Path(out_dir).resolve()
    if out.exists() and not out.is_dir():
        check_archive(out, identity, prefix)  # says what is wrong
    if lock is not None and lock.directory != out:
        raise ValueError(f"the lock given is on {lock.directory}, not on {out}")
    with nullcontext(lock) if lock is not None else export_lock(out):
        result = _export_locked(
            spark,
            dsn,
            out,
            prefix,
            identity,
            history_window=history_window,
            keep_msg=keep_msg,
            step=progress or (lambda _name: None),
            now=int(time.time() * 1000) if now_ms is None else now_ms,
        )
    result.seconds = time.monotonic() - started
    return result


def _export_locked(
    spark: SparkSession,
    dsn: str,
    out: Path,
    prefix: str,
    identity: Identity,
    *,
    history_window: int,
    keep_msg: bool,
    step: Progress,
    now: int,
) -> ExportResult:
    """:func:`export`, holding the directory's lock."""
    src = jdbc_source(dsn, prefix)
    step("recover")
    marks = check_archive(out, identity, prefix)
    recover(out, marks)
    run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]
    stage = out / STAGING / run_id
    prev_snapshot = None
    has_history = table_exists(spark, src, "MQSTORE_HISTORY")
    warnings: list[str] = []
    if marks.get("snapshot"):
        snap_dir = out / SNAPSHOTS / marks["snapshot"]
        if snap_dir.exists():
            prev_snapshot = spark.read.parquet(str(snap_dir))
        elif warning := _missing_snapshot(snap_dir, has_history):
            log.warning("%s", warning)
            warnings.append(warning)

    step("snapshot")
    read_msg_index(spark, src).write.parquet(str(stage / "snapshot"))
    snapshot = spark.read.parquet(str(stage / "snapshot"))

    step("messages")
    new_msgs, new_msgs_mark = _new_messages(spark, src, snapshot, prev_snapshot, marks, out)
    message_rows(new_msgs, keep_msg).write.partitionBy("destination", "date").options(
        **_BODY_WRITER_OPTIONS
    ).parquet(str(stage / "messages"))

    step("history")
    hist_mark = marks.get("hist_max_id")
    if has_history:
        source = "mqstore_history"
        exported = None
        if any((out / "history").rglob("*.parquet")):
            exported = spark.read.parquet(str(out / "history")).select("hist_id")
        hist, hist_mark = read_history(spark, src, hist_mark, exported, history_window)
        if prev_snapshot is not None and marks.get("history_source") == "snapshot-diff":
            hist = hist.unionByName(
                _removed_before_adoption(spark, prev_snapshot, snapshot, hist, out, marks, now)
            )
    else:
        source = "snapshot-diff"
        hist = None
        if prev_snapshot is not None:
            stored = _stored_at_last_run(spark, prev_snapshot, out, marks)
            hist = derive_removals(stored, snapshot, now)
    if hist is not None:
        history_rows(hist, keep_msg).write.partitionBy("destination", "date").options(
            **_BODY_WRITER_OPTIONS
        ).parquet(str(stage / "history"))

    if marks and not has_identity(marks):
        try:
            _verify_unrecorded_origin(spark, src, out, stage, marks, snapshot, has_history)
        except ArchiveError:
            shutil.rmtree(stage, ignore_errors=True)
            raise

    step("publish")
    result = ExportResult(
        run_id=run_id,
        messages=_counts(spark, stage / "messages"),
        history=_counts(spark, stage / "history"),
        warnings=warnings,
    )
    _move_tagged(stage / "messages", out / "messages", run_id)
    _move_tagged(stage / "history", out / "history", run_id)
    (out / SNAPSHOTS).mkdir(exist_ok=True)
    os.replace(stage / "snapshot", out / SNAPSHOTS / run_id)
    fsync_tree(out / SNAPSHOTS / run_id)
    fsync_path(out)
    new_marks = {
        "format": FORMAT_VERSION,
        "run_id": run_id,
        "exported_at": now,
        "prefix": prefix,
        DATABASE_KEY: identity,
        "msgs_max_id": new_msgs_mark,
        "hist_max_id": hist_mark,
        "history_source": source,
        "snapshot": run_id,
    }
    _write_watermarks(out, new_marks)
    recover(out, new_marks)
    result.watermarks = new_marks
    return result


def _verify_unrecorded_origin(
    spark: SparkSession,
    src: JdbcSource,
    out: Path,
    stage: Path,
    marks: dict[str, Any],
    snapshot: DataFrame,
    has_history: bool,
) -> None:
    """Check watermarks that do not name their database (format 1 and 2) against this one.

    Were they this database's, every row it holds at or below them is archived, or is a
    late commit this run has just exported. Rows of another database or prefix are not
    (they were never read): then :class:`ArchiveError`, and nothing is published.
    """
    missing: dict[str, int] = {}
    msgs_mark = marks.get("msgs_max_id")
    if isinstance(msgs_mark, int):
        keys = ["id", "container", "msgid_prod", "msgid_seq"]
        below = snapshot.where(sf.col("id") <= msgs_mark).select(*keys)
        missing["message"] = _not_archived(spark, below, out / "messages", stage / "messages", keys)
    hist_mark = marks.get("hist_max_id")
    if (
        has_history
        and isinstance(hist_mark, int)
        and marks.get("history_source") == "mqstore_history"
    ):
        keys = ["hist_id", "id", "container", "msgid_prod", "msgid_seq", "removed_at"]
        below = read_query(
            spark,
            src,
            f"SELECT {', '.join(keys)} FROM {src.table('MQSTORE_HISTORY')} "
            f"WHERE hist_id <= {int(hist_mark)}",
        )
        missing["history"] = _not_archived(spark, below, out / "history", stage / "history", keys)
    lost = [f"{n} {what} row(s)" for what, n in missing.items() if n]
    if lost:
        raise ArchiveError(
            f"{out} does not hold {' and '.join(lost)} of this database at or below its "
            "watermarks (written before exports recorded their database): it archives another "
            "database or table prefix; export these tables into another --out directory"
        )


def _not_archived(
    spark: SparkSession, rows: DataFrame, archive: Path, staged: Path, keys: list[str]
) -> int:
    """How many of ``rows`` (``keys`` columns) neither ``archive`` nor ``staged`` holds
    (nulls equal: ``MSGID_PROD`` and ``MSGID_SEQ`` may be null)."""
    if any(archive.rglob("*.parquet")):
        rows = match_rows(rows, read_dataset(spark, archive), "left_anti", keys)
    if any(staged.rglob("*.parquet")):
        rows = rows.join(spark.read.parquet(str(staged)).select(keys[0]), keys[0], "left_anti")
    return rows.count()


def current_messages(spark: SparkSession, out_dir: str | os.PathLike[str]) -> DataFrame:
    """The exported messages still stored at the last run (messages ⋉ last snapshot, on
    :data:`.history.ROW_KEY`). Raises :class:`ArchiveError` when ``out_dir`` holds no
    export or its last snapshot is missing."""
    out = Path(out_dir)
    marks = load_watermarks(out)
    if not marks.get("snapshot"):
        raise ArchiveError(
            f"{out} holds no export ({WATERMARKS} naming a snapshot): give the --out "
            "directory of mqstore export"
        )
    snap_dir = out / SNAPSHOTS / marks["snapshot"]
    if not snap_dir.is_dir():
        raise ArchiveError(
            f"the last run's snapshot {snap_dir} is missing (deleted?): run mqstore export "
            f"into {out} once more to write a new one"
        )
    if not any((out / "messages").rglob("*.parquet")):  # no message was ever exported
        return message_rows(spark.createDataFrame([], _MSGS_SCHEMA))
    snap = spark.read.parquet(str(snap_dir))
    return match_rows(read_dataset(spark, out / "messages"), snap, "left_semi")


__all__ = [
    "LOCK_FILE",
    "STEPS",
    "WATERMARKS",
    "ArchiveError",
    "ExportLock",
    "ExportResult",
    "check_archive",
    "current_messages",
    "destination_column",
    "export",
    "export_lock",
    "history_rows",
    "load_watermarks",
    "message_rows",
    "read_dataset",
    "recover",
]
