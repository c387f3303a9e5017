"""Whether watermarks that do not name their database (format 1 and 2) are this one's.

Exports before format 3 did not record their database. Before such watermarks are trusted,
every row the database holds at or below them must be in the archive, or exported by the
run checking them (a late commit); rows of another database or prefix are not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from .archive_guard import ArchiveError
from .datasets import read_dataset
from .history import match_rows
from .sources import JdbcSource, read_query


def verify_unrecorded_origin(
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


__all__ = ["verify_unrecorded_origin"]
