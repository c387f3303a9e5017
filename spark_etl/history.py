"""What became of messages: ``mqstore_history`` read incrementally, or removals derived by
comparing snapshots of ``ACTIVEMQ_MSGS`` ids when plain ActiveMQ wrote the database.

Identity values of ``hist_id`` are assigned at insert but become visible at commit, so a
row with a smaller ``hist_id`` can appear after a larger one was exported. Each run
therefore re-reads the ids of a window below the watermark and picks up the ones not yet
exported (deduplicated on ``hist_id``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from .sources import JdbcSource, read_keys, read_query, read_ranged

#: Columns of an exported history row (``hist_id`` is null for derived removals).
HISTORY_COLUMNS = [
    "hist_id",
    "id",
    "container",
    "msgid_prod",
    "msgid_seq",
    "priority",
    "expiration",
    "enqueued_at",
    "removed_at",
    "outcome",
    "msg",
]
#: How many ``hist_id`` values below the watermark are re-checked for late commits.
DEFAULT_WINDOW = 100_000
#: Outcome of a removal seen only as a missing id between two snapshots.
REMOVED = "removed"
#: Above this many late rows, they are read as one range and filtered in Spark.
_MAX_KEY_LIST = 5_000
#: What tells two ``ACTIVEMQ_MSGS`` rows apart over time: the ``ID`` alone does not, as the
#: broker resumes IDs at ``max(MAX(ID), MAX(LAST_ACKED_ID)) + 1`` when it starts, so the
#: IDs of the newest messages, consumed before a restart, are given to new ones.
ROW_KEY = ("id", "msgid_prod", "msgid_seq")


def match_rows(
    rows: DataFrame, others: DataFrame, how: str, on: Sequence[str] = ROW_KEY
) -> DataFrame:
    """``rows`` joined ``how`` (``left_semi``, ``left_anti``) to ``others`` on columns ``on``
    (nulls equal: ActiveMQ's ``MSGID_PROD`` and ``MSGID_SEQ`` may be null)."""
    keys = others.select(*[sf.col(c).alias(f"_other_{c}") for c in on])
    same = reduce(lambda a, b: a & b, [rows[c].eqNullSafe(keys[f"_other_{c}"]) for c in on])
    return rows.join(keys, same, how)


def derive_removals(previous: DataFrame, current: DataFrame, removed_at: int) -> DataFrame:
    """History rows for ids in the ``previous`` snapshot that ``current`` no longer holds.

    Pure transform over snapshot DataFrames (``SNAPSHOT_COLUMNS``); ``removed_at`` is the
    time of the current snapshot, so the removal happened at or before it. An ID the
    broker has since given to another message (:data:`ROW_KEY`) was removed too.
    """
    gone = match_rows(previous, current, "left_anti")
    return gone.select(
        sf.lit(None).cast("bigint").alias("hist_id"),
        "id",
        "container",
        "msgid_prod",
        "msgid_seq",
        "priority",
        "expiration",
        sf.lit(None).cast("bigint").alias("enqueued_at"),
        sf.lit(removed_at).cast("bigint").alias("removed_at"),
        sf.lit(REMOVED).alias("outcome"),
        sf.lit(None).cast("binary").alias("msg"),
    )


def late_keys(candidates: DataFrame, exported: DataFrame | None, key: str) -> DataFrame:
    """Keys in ``candidates`` not yet in ``exported`` (pure; both hold a ``key`` column)."""
    keys = candidates.select(key)
    if exported is None:
        return keys
    return keys.join(exported.select(key).where(sf.col(key).isNotNull()), key, "left_anti")


def fetch_late_rows(
    spark: SparkSession, src: JdbcSource, base: str, key: str, keys: list[int]
) -> DataFrame | None:
    """The rows of ``base`` with these keys (a short IN list, or a range filtered in Spark)."""
    if not keys:
        return None
    if len(keys) <= _MAX_KEY_LIST:
        return read_keys(spark, src, base, keys, key)
    wanted = spark.createDataFrame([(k,) for k in keys], f"{key} bigint")
    ranged = read_ranged(spark, src, base, key, after=min(keys) - 1, upto=max(keys))
    return ranged.join(wanted, key, "left_semi")


def read_history(
    spark: SparkSession,
    src: JdbcSource,
    watermark: int | None,
    exported: DataFrame | None,
    window: int = DEFAULT_WINDOW,
) -> tuple[DataFrame, int | None]:
    """New ``mqstore_history`` rows and the new ``hist_id`` watermark.

    New means ``hist_id > watermark`` (pushed down, partitioned) plus any row of the
    window ``(watermark - window, watermark]`` missing from ``exported`` (a late commit).
    """
    table = src.table("MQSTORE_HISTORY")
    top = read_query(spark, src, f"SELECT max(hist_id) AS hi FROM {table}").first()
    hi = None if top is None or top["hi"] is None else int(top["hi"])
    main = read_ranged(spark, src, "MQSTORE_HISTORY", "hist_id", after=watermark, upto=hi)
    main = main.select(*HISTORY_COLUMNS)
    if hi is None:  # empty when asked: a row committed since waits for the next run
        main = main.limit(0)
    if watermark is not None and hi is not None:
        floor = watermark - window
        candidates = read_query(
            spark,
            src,
            f"SELECT hist_id FROM {table} WHERE hist_id > {floor} AND hist_id <= {watermark}",
        )
        window_exported = None if exported is None else exported.where(sf.col("hist_id") > floor)
        late = [
            int(r["hist_id"]) for r in late_keys(candidates, window_exported, "hist_id").collect()
        ]
        late_rows = fetch_late_rows(spark, src, "MQSTORE_HISTORY", "hist_id", late)
        if late_rows is not None:
            main = main.unionByName(late_rows.select(*HISTORY_COLUMNS))
    new_mark = hi if hi is not None and (watermark is None or hi > watermark) else watermark
    return main, new_mark


__all__ = [
    "DEFAULT_WINDOW",
    "HISTORY_COLUMNS",
    "REMOVED",
    "ROW_KEY",
    "derive_removals",
    "fetch_late_rows",
    "late_keys",
    "match_rows",
    "read_history",
]
