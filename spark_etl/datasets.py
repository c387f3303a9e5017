"""The archive's datasets: rows partitioned by destination and date, and read back.

``messages`` and ``history`` are Parquet datasets partitioned by ``destination`` (the
CONTAINER, or for a name too long for a directory a shortened one: :mod:`.layout`) and
``date``; rows carry the full CONTAINER in ``container``. :func:`message_rows` and
:func:`history_rows` add the partition columns, :data:`BODY_WRITER_OPTIONS` are the writer
options of files holding message bodies, and :func:`read_dataset` reads a dataset back (the
committed files only, with ``container`` filled for files of format 1).
"""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.types import StringType

from .archive_guard import committed_files
from .decode import with_decoded
from .history import HISTORY_COLUMNS
from .layout import ESCAPED, MAX_VALUE_BYTES, PARTITION_COLUMN, partition_value

#: Parquet writer options for the files that hold message bodies (MSG, its text or body):
#: no dictionary encoding (hashing big, mostly unique values into a dictionary that overflows
#: anyway costs ~10% of the write) and no min/max statistics (useless for bodies, and each
#: new extreme is a copy of a body) for those two columns; and the row group's and the page's
#: size checked from the first row instead of the 100th, which with 4 MiB messages meant
#: 400 MiB buffered per open file before the writer first looked.
_BODIES = ("msg", "text", "body")
BODY_WRITER_OPTIONS = {
    **{f"parquet.enable.dictionary#{col}": "false" for col in _BODIES},
    **{f"parquet.column.statistics.enabled#{col}": "false" for col in _BODIES},
    "parquet.page.size.row.check.min": "1",
}
#: Java regex matching one character that Spark escapes in a partition directory name.
_ESCAPED_CLASS = "[" + "".join(f"\\u{ord(ch):04x}" for ch in sorted(ESCAPED)) + "]"
_shorten = sf.udf(partition_value, StringType(), useArrow=True)
#: Epoch ms of the first and the last instant of the years 1 to 9999 (the dates that
#: Python's ``datetime.date``, and so PySpark's and pandas' readers, can hold).
_FIRST_DAY_MS, _LAST_DAY_MS = -62_135_596_800_000, 253_402_300_799_999


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


def rows_per_container(spark: SparkSession, path: Path) -> dict[str, int]:
    """Rows per full CONTAINER of the dataset at ``path`` (empty: no file)."""
    if not any(path.rglob("*.parquet")):
        return {}
    rows = read_dataset(spark, path).groupBy("container").count().collect()
    return {str(r["container"]): int(r["count"]) for r in rows}


__all__ = [
    "BODY_WRITER_OPTIONS",
    "destination_column",
    "history_rows",
    "message_rows",
    "read_dataset",
    "rows_per_container",
]
