"""What an export run reads beyond its watermarks, and what the last run saw stored.

New message rows are those above the watermark up to the snapshot's MAX(ID), plus late
rows below it (:func:`new_messages`): a late commit, or a new message under an ID the broker
reused. When plain ActiveMQ wrote the database, removals are found by comparing the last
run's stored rows (:func:`stored_at_last_run`) with this run's snapshot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from .datasets import read_dataset
from .history import ROW_KEY, derive_removals, fetch_late_rows, match_rows
from .runs import run_files
from .sources import SNAPSHOT_COLUMNS, JdbcSource, read_msgs


def new_messages(
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
        last_run = run_files(out / "messages", marks.get("run_id"))
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


def missing_snapshot(snap_dir: Path, has_history: bool) -> str | None:
    """What a last run's snapshot deleted by hand costs this run (None: nothing)."""
    if has_history:  # history comes from mqstore_history; late rows from the archive
        return None
    return (
        f"the last run's snapshot {snap_dir} is missing (deleted?): messages removed from "
        "the database since that run get no history rows ('removed') in this run; new "
        "messages are exported as usual, and this run writes a new snapshot"
    )


def stored_at_last_run(
    spark: SparkSession, prev_snapshot: DataFrame, out: Path, marks: dict[str, Any]
) -> DataFrame:
    """The rows the last run saw stored: its snapshot, plus the rows its read exported that
    committed after the snapshot was taken (:data:`.sources.SNAPSHOT_COLUMNS`). Without
    them, such a row removed before this run's snapshot would leave no history row."""
    last_run = run_files(out / "messages", marks.get("run_id"))
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


def removed_before_adoption(
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
    stored = stored_at_last_run(spark, prev_snapshot, out, marks)
    return match_rows(derive_removals(stored, snapshot, now), hist, "left_anti")


__all__ = [
    "missing_snapshot",
    "new_messages",
    "removed_before_adoption",
    "stored_at_last_run",
]
