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
carry the run id), writes ``_watermarks.json`` atomically, then cleans up (:mod:`.runs`).
A run that dies before the watermarks are written is undone by the next run, so re-running
after a crash, or twice in a row, neither duplicates nor skips rows. A run holds an
exclusive ``flock`` on ``.lock`` throughout, so a second run into the same directory
refuses at once. What a run reads beyond its watermarks is :mod:`.increment`'s.

The watermarks are those of one database and table prefix (:mod:`mqstore.archive`): a run
refuses a directory written for another one, and a directory with exported Parquet files
but no readable watermarks (continuing would export everything again). Watermarks written
before the database was recorded (format 1 and 2) are checked against the database before
they are trusted: every row at or below them that the database still holds must be in the
archive, or exported by this run (:mod:`.origin`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from mqstore.archive import DATABASE_KEY, Identity, has_identity

from .archive_guard import STAGING, WATERMARKS, ArchiveError, check_archive, load_watermarks
from .datasets import (
    BODY_WRITER_OPTIONS,
    destination_column,
    history_rows,
    message_rows,
    read_dataset,
    rows_per_container,
)
from .durable import fsync_path, fsync_tree, write_atomically
from .history import DEFAULT_WINDOW, derive_removals, match_rows, read_history
from .increment import missing_snapshot, new_messages, removed_before_adoption, stored_at_last_run
from .origin import verify_unrecorded_origin
from .runs import (
    LOCK_FILE,
    SNAPSHOTS,
    ExportLock,
    export_lock,
    move_tagged,
    recover,
)
from .sources import inspect_database, jdbc_source, read_msg_index, table_exists

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
        elif warning := missing_snapshot(snap_dir, has_history):
            log.warning("%s", warning)
            warnings.append(warning)

    step("snapshot")
    read_msg_index(spark, src).write.parquet(str(stage / "snapshot"))
    snapshot = spark.read.parquet(str(stage / "snapshot"))

    step("messages")
    new_msgs, new_msgs_mark = new_messages(spark, src, snapshot, prev_snapshot, marks, out)
    message_rows(new_msgs, keep_msg).write.partitionBy("destination", "date").options(
        **BODY_WRITER_OPTIONS
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
                removed_before_adoption(spark, prev_snapshot, snapshot, hist, out, marks, now)
            )
    else:
        source = "snapshot-diff"
        hist = None
        if prev_snapshot is not None:
            stored = stored_at_last_run(spark, prev_snapshot, out, marks)
            hist = derive_removals(stored, snapshot, now)
    if hist is not None:
        history_rows(hist, keep_msg).write.partitionBy("destination", "date").options(
            **BODY_WRITER_OPTIONS
        ).parquet(str(stage / "history"))

    if marks and not has_identity(marks):
        try:
            verify_unrecorded_origin(spark, src, out, stage, marks, snapshot, has_history)
        except ArchiveError:
            shutil.rmtree(stage, ignore_errors=True)
            raise

    step("publish")
    result = ExportResult(
        run_id=run_id,
        messages=rows_per_container(spark, stage / "messages"),
        history=rows_per_container(spark, stage / "history"),
        warnings=warnings,
    )
    move_tagged(stage / "messages", out / "messages", run_id)
    move_tagged(stage / "history", out / "history", run_id)
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


def _write_watermarks(out_dir: Path, marks: dict[str, Any]) -> None:
    """Commit a run: ``marks`` become the directory's watermarks, atomically."""
    write_atomically(out_dir / WATERMARKS, json.dumps(marks, indent=2, sort_keys=True))


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
