"""Audit of a store: depth, ages, subscription backlogs and anomalies, as JSON and HTML.

Each figure is a pure DataFrame transform (tested on fixture DataFrames); :func:`audit`
wires extract, transforms and the report together and checks the thresholds.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

from mqstore.archive import has_identity, read_watermarks
from mqstore.lease_time import decode_lease_time

from .archive_guard import history_archive
from .datasets import read_dataset
from .decode import with_decoded
from .durable import write_atomically
from .identity import container_mismatches, msgid_mismatches
from .lock_probe import RowLockProbe, probe_row_lock
from .report_html import figure, render
from .sources import (
    inspect_database,
    jdbc_source,
    read_acks,
    read_lock,
    read_msgs,
    read_table,
    table_exists,
)
from .xids import MALFORMED_XID_ADVICE, in_doubt, malformed_xids

#: Age buckets of the distribution: (label, upper bound in ms).
AGE_BUCKETS: tuple[tuple[str, int | None], ...] = (
    ("<1m", 60_000),
    ("<1h", 3_600_000),
    ("<1d", 86_400_000),
    ("<7d", 7 * 86_400_000),
    (">=7d", None),
)
#: Longest list of rows kept per finding (counts are always complete).
MAX_LISTED = 200
#: ``ACTIVEMQ_ACKS.PRIORITY`` of durable subscriptions' rows is below this (0..9, one row
#: per JMS priority with ``prioritizedMessages``, else 0), as ``mqstore.statements`` reads
#: them; the rows ActiveMQ's ``doRecordDestination`` writes to remember a destination
#: (PRIORITY 11, CLIENT_ID = SUB_NAME = its name) are not subscriptions.
SUBSCRIPTION_PRIORITIES = 10
#: How :func:`subscription_backlog` counts, by whether the store has prioritizedMessages.
BACKLOG_RULES: dict[bool, dict[str, Any]] = {
    False: {
        "mode": "plain",
        "prioritized_messages": False,
        "description": "every visible message of the topic, whatever its PRIORITY, with ID "
        "> the least LAST_ACKED_ID of the subscription's ACKS rows",
    },
    True: {
        "mode": "prioritized",
        "prioritized_messages": True,
        "description": "the visible messages of PRIORITY p with ID > the LAST_ACKED_ID of "
        "the subscription's ACKS row of PRIORITY p, summed over its rows",
    },
}


@dataclass(frozen=True)
class Thresholds:
    """Limits that make :func:`audit` report a violation (None = not checked)."""

    max_depth: int | None = None
    max_backlog: int | None = None
    max_pending_age_s: float | None = None
    max_expired: int | None = None
    max_in_doubt: int | None = None
    max_malformed_xids: int | None = None
    max_undecodable: int | None = None
    max_duplicates: int | None = None
    max_priority_out_of_range: int | None = None
    max_container_mismatches: int | None = None
    max_msgid_mismatches: int | None = None
    max_lease_age_s: float | None = None


def _rows(df: DataFrame, limit: int | None = MAX_LISTED) -> list[dict[str, Any]]:
    rows = df.limit(limit).collect() if limit else df.collect()
    return [r.asDict(recursive=True) for r in rows]


def _age(timestamp: str, now_ms: int) -> Column:
    """Age in ms of a message by its JMS timestamp: null without one (0), or for one too far
    from ``now_ms`` for a long; never negative (``greatest`` would make a null age 0)."""
    age = sf.try_subtract(sf.lit(now_ms), sf.nullif(sf.col(timestamp), sf.lit(0)))
    return sf.when(age < 0, sf.lit(0)).otherwise(age)


def destination_stats(msgs: DataFrame, now_ms: int) -> DataFrame:
    """Per destination: depth, XA-prepared rows, oldest/newest timestamp, age percentiles and
    age buckets.

    ``depth`` counts the rows without an ``XID``, as ActiveMQ's message count
    (``destinationMessageCountStatement``) and ``mqstore stats`` do; ``prepared`` counts the
    rows with one (XA-prepared adds and removals, in doubt until their transaction ends),
    which the ages and buckets leave out too. A destination holding only prepared rows is
    listed with depth 0.
    """
    visible = sf.col("xid").isNull()
    aged = msgs.withColumn("age_ms", sf.when(visible, _age("timestamp", now_ms)))
    bucket = sf.lit(AGE_BUCKETS[-1][0])
    for label, bound in reversed(AGE_BUCKETS[:-1]):
        assert bound is not None
        bucket = sf.when(sf.col("age_ms") < bound, label).otherwise(bucket)
    aged = aged.withColumn(
        "bucket",
        sf.when(~visible, sf.lit(None))
        .when(sf.col("age_ms").isNull(), "unknown")
        .otherwise(bucket),
    )
    buckets = [
        sf.sum(sf.when(sf.col("bucket") == label, 1).otherwise(0)).alias(f"age{label}")
        for label, _ in (*AGE_BUCKETS, ("unknown", None))
    ]
    return (
        aged.groupBy(sf.col("container").alias("destination"))
        .agg(
            sf.sum(sf.when(visible, 1).otherwise(0)).alias("depth"),
            sf.sum(sf.when(visible, 0).otherwise(1)).alias("prepared"),
            sf.min(sf.when(visible, sf.nullif(sf.col("timestamp"), sf.lit(0)))).alias(
                "oldest_timestamp"
            ),
            sf.max(sf.when(visible, sf.col("timestamp"))).alias("newest_timestamp"),
            sf.percentile_approx("age_ms", 0.5).alias("age_p50_ms"),
            sf.percentile_approx("age_ms", 0.9).alias("age_p90_ms"),
            sf.max("age_ms").alias("age_max_ms"),
            *buckets,
        )
        .orderBy("destination")
    )


def durable_subscriptions(acks: DataFrame) -> DataFrame:
    """The ACKS rows of durable subscriptions (pure): rows of topics with a message priority
    (:data:`SUBSCRIPTION_PRIORITIES`), as ``mqstore.statements`` reads them; ActiveMQ's
    destination records (PRIORITY 11) and anything else on a queue are not subscriptions."""
    return acks.where(
        (sf.col("priority") < SUBSCRIPTION_PRIORITIES) & sf.col("container").startswith("topic://")
    )


def subscription_backlog(
    acks: DataFrame, msgs: DataFrame, now_ms: int, *, prioritized: bool = False
) -> DataFrame:
    """Per durable subscription: the messages it has not acknowledged and the oldest one's age.

    As ``mqstore stats`` and ActiveMQ count them in the store's mode (:data:`BACKLOG_RULES`):

    * plain (``prioritized`` False, ActiveMQ's default), as the statements without
      ``PRIORITY``: every message of the topic after the subscription's position, the least
      ``LAST_ACKED_ID`` of its rows, whatever the message's ``PRIORITY`` (a broker with
      ``prioritizedMessages`` may have stored some); ``last_acked_id`` is that position.
    * prioritized: a message counts against the subscription's row of its ``PRIORITY``
      (``M.PRIORITY = D.PRIORITY``), one row per priority; ``last_acked_id`` is the
      greatest of the rows'.

    A NULL ``LAST_ACKED_ID`` matches nothing: a row holding one counts no message, and a
    plain subscription whose rows all hold one has no backlog (``min`` skips NULLs, as in
    SQL). In-doubt (XA-prepared) messages are not deliverable and are not counted. An ACKS
    row with an XID is the subscription's own row holding a prepared acknowledgement (its
    LAST_ACKED_ID moves only at commit), so it counts like any other. Rows that are not
    subscriptions (:func:`durable_subscriptions`) are left out; selectors are not evaluated.
    """
    subs = durable_subscriptions(acks)
    key = ["container", "client_id", "sub_name"]
    visible = msgs.where(sf.col("xid").isNull()).select(
        sf.col("container").alias("m_container"),
        sf.col("id").alias("m_id"),
        sf.col("store_priority").alias("m_priority"),
        sf.col("timestamp").alias("m_timestamp"),
    )
    if not prioritized:  # one position per subscription
        subs = subs.groupBy(*key).agg(
            sf.max("selector").alias("selector"),
            sf.min("last_acked_id").alias("last_acked_id"),
        )
    cond = (visible["m_container"] == subs["container"]) & (visible["m_id"] > subs["last_acked_id"])
    if prioritized:
        cond = cond & (visible["m_priority"] == subs["priority"])
    pending = subs.join(visible, cond, "left")
    return (
        pending.groupBy(*key)
        .agg(
            sf.max("selector").alias("selector"),
            sf.max("last_acked_id").alias("last_acked_id"),
            sf.count("m_id").alias("backlog"),
            sf.min("m_id").alias("first_pending_id"),
            sf.max(_age("m_timestamp", now_ms)).cast("bigint").alias("oldest_pending_age_ms"),
        )
        .orderBy(*key)
    )


def expired_messages(msgs: DataFrame, now_ms: int) -> DataFrame:
    """Messages whose ``EXPIRATION`` has passed but which are still stored."""
    return msgs.where((sf.col("expiration") > 0) & (sf.col("expiration") < now_ms)).select(
        "id", sf.col("container").alias("destination"), "expiration", "jms_message_id"
    )


def orphan_subscriptions(acks: DataFrame, msgs: DataFrame) -> DataFrame:
    """Durable subscriptions whose destination holds no message."""
    return (
        durable_subscriptions(acks)
        .select("container", "client_id", "sub_name")
        .distinct()
        .join(msgs.select("container").distinct(), "container", "left_anti")
        .orderBy("container", "client_id", "sub_name")
    )


def duplicate_message_ids(msgs: DataFrame) -> DataFrame:
    """JMS message ids stored more than once (in one or several destinations)."""
    return (
        msgs.where(sf.col("jms_message_id").isNotNull())
        .groupBy("jms_message_id")
        .agg(sf.count("*").alias("rows"), sf.sort_array(sf.collect_list("id")).alias("ids"))
        .where(sf.col("rows") > 1)
        .orderBy("jms_message_id")
    )


def undecodable(msgs: DataFrame) -> DataFrame:
    """Rows whose ``MSG`` does not decode, with the decoder's message."""
    return msgs.where(sf.col("decode_error").isNotNull()).select(
        "id", sf.col("container").alias("destination"), "decode_error"
    )


def priority_out_of_range(msgs: DataFrame) -> DataFrame:
    """Rows whose ``PRIORITY`` column is not a JMS priority (0 to 9): ActiveMQ's prioritized
    statements and the subscriptions' rows per priority know only those. Any of 0 to 9 is
    valid whether or not the store is prioritized (adopted data keeps its priorities)."""
    return msgs.where(~sf.col("store_priority").between(0, 9)).select(
        "id", sf.col("container").alias("destination"), sf.col("store_priority").alias("priority")
    )


#: The findings :func:`build_report` counts and lists besides the figures, in report order,
#: with the words the command's summary line uses for a non-zero count.
ANOMALIES: dict[str, str] = {
    "expired": "expired",
    "in_doubt": "in-doubt XA",
    "malformed_xids": "malformed XID",
    "orphan_subscriptions": "orphan subscription",
    "duplicate_message_ids": "duplicate JMS id",
    "undecodable": "undecodable",
    "priority_out_of_range": "PRIORITY outside 0-9",
    "container_mismatches": "CONTAINER not MSG's destination",
    "msgid_mismatches": "MSGID_PROD/SEQ not MSG's id",
}


def anomaly_summary(counts: dict[str, int]) -> str:
    """The non-zero :data:`ANOMALIES` counts in a few words (empty when there are none)."""
    return ", ".join(f"{counts[name]} {words}" for name, words in ANOMALIES.items() if counts[name])


def lock_status(
    lock: DataFrame, now_ms: int, row_lock: RowLockProbe | None = None
) -> dict[str, Any]:
    """The lock row: the lease (holder, None when released, and how old it is) and whether
    a row-lock master holds the row (``row_lock``, from :func:`.lock_probe.probe_row_lock`;
    None: not probed).

    ``state`` sums them up: ``held (row lock)`` (ActiveMQ's default locker or mqstore's
    ``--lock row``, which write nothing into the row), ``held (lease)``, ``held (journaled
    lease)`` and, once its broker stopped renewing it, ``kept (journaled)`` (a broker with a
    local journal, whose lease no other broker takes over: :mod:`mqstore.lease_time`;
    ``lease_time`` is its end as decoded), ``lease expired``,
    ``free``, ``absent`` (no row ID=1), or ``unknown`` when no lease runs and the row could
    not be probed: ``row_lock_error`` says why.
    """
    probe = row_lock or RowLockProbe(None, "not probed")
    rows = lock.orderBy("id").collect()
    if not rows:
        return {
            "present": False,
            "state": "absent",
            "holder": None,
            "lease_time": None,
            "lease_age_ms": None,
            "journaled": False,
            "row_lock": False,
            "row_lock_error": None,
        }
    row = rows[0]
    lease, journaled = decode_lease_time(row["time"])
    held = bool(row["broker_name"]) and bool(lease)
    # ActiveMQ writes TIME = now + lease interval: a positive age means an overdue renewal.
    age = (now_ms - int(lease)) if held and lease is not None else None
    if probe.held:
        state = "held (row lock)"
    elif journaled and held:  # no broker takes it over: overdue, it is kept for a journal
        state = "held (journaled lease)" if age is not None and age <= 0 else "kept (journaled)"
    elif age is not None and age <= 0:
        state = "held (lease)"
    elif probe.held is None:
        state = "unknown"
    else:
        state = "free" if age is None else "lease expired"
    return {
        "present": True,
        "state": state,
        "holder": row["broker_name"] if held else None,
        "lease_time": lease,
        "lease_age_ms": age,
        "journaled": journaled,
        "row_lock": probe.held,
        "row_lock_error": probe.error,
    }


def history_per_hour(history: DataFrame) -> DataFrame:
    """Removals per hour and outcome (from ``mqstore_history`` and/or the exported history)."""
    hour = sf.date_format(sf.timestamp_millis(sf.col("removed_at")), "yyyy-MM-dd HH:00")
    return history.groupBy(hour.alias("hour"), "outcome").count().orderBy("hour", "outcome")


def check(report: dict[str, Any], limits: Thresholds) -> list[str]:
    """The thresholds ``report`` crosses, one sentence each."""
    out: list[str] = []

    def over(value: float | None, limit: float | None, what: str) -> None:
        if limit is not None and value is not None and value > limit:
            out.append(f"{what}: {figure(value)} > {figure(limit)}")

    for d in report["destinations"]:
        over(d["depth"], limits.max_depth, f"depth of {d['destination']}")
    for s in report["subscriptions"]:
        name = f"{s['container']} {s['client_id']}/{s['sub_name']}"
        over(s["backlog"], limits.max_backlog, f"backlog of {name}")
        age = s["oldest_pending_age_ms"]
        over(
            None if age is None else age / 1000, limits.max_pending_age_s, f"pending age of {name}"
        )
    counts = report["counts"]
    over(counts["expired"], limits.max_expired, "expired messages still stored")
    over(counts["in_doubt"], limits.max_in_doubt, "in-doubt XA rows")
    over(counts["malformed_xids"], limits.max_malformed_xids, "malformed XA XIDs")
    over(counts["undecodable"], limits.max_undecodable, "undecodable messages")
    over(counts["duplicate_message_ids"], limits.max_duplicates, "duplicate JMS message ids")
    over(
        counts["priority_out_of_range"],
        limits.max_priority_out_of_range,
        "PRIORITY outside 0 to 9",
    )
    over(
        counts["container_mismatches"],
        limits.max_container_mismatches,
        "CONTAINER differing from MSG's destination",
    )
    over(
        counts["msgid_mismatches"],
        limits.max_msgid_mismatches,
        "MSGID_PROD/MSGID_SEQ differing from MSG's message id",
    )
    age = report["lock"]["lease_age_ms"]
    over(None if age is None else age / 1000, limits.max_lease_age_s, "lease age")
    return out


def build_report(
    msgs: DataFrame,
    acks: DataFrame,
    lock: DataFrame,
    history: DataFrame | None,
    *,
    now_ms: int,
    limits: Thresholds,
    row_lock: RowLockProbe | None = None,
    prioritized: bool = False,
) -> dict[str, Any]:
    """The audit report (a JSON-ready dict) from decoded messages (with the identity
    columns: ``with_decoded(..., identity=True)``), ACKS, LOCK and history;
    ``row_lock`` is what probing the lock row found (:func:`lock_status`), ``prioritized``
    whether the store has prioritizedMessages (:func:`subscription_backlog`; the rule is
    shown as ``backlog_rule``)."""
    msgs = msgs.cache()
    findings = {
        "expired": expired_messages(msgs, now_ms),
        "in_doubt": in_doubt(msgs, acks),
        "malformed_xids": malformed_xids(msgs, acks),
        "orphan_subscriptions": orphan_subscriptions(acks, msgs),
        "duplicate_message_ids": duplicate_message_ids(msgs),
        "undecodable": undecodable(msgs),
        "priority_out_of_range": priority_out_of_range(msgs),
        "container_mismatches": container_mismatches(msgs),
        "msgid_mismatches": msgid_mismatches(msgs),
    }
    assert tuple(findings) == tuple(ANOMALIES)
    report: dict[str, Any] = {
        "generated_at": now_ms,
        "age_buckets": [label for label, _ in AGE_BUCKETS] + ["unknown"],
        "destinations": _rows(destination_stats(msgs, now_ms), None),
        "backlog_rule": dict(BACKLOG_RULES[prioritized]),
        "subscriptions": _rows(
            subscription_backlog(acks, msgs, now_ms, prioritized=prioritized), None
        ),
        "lock": lock_status(lock, now_ms, row_lock),
        "history_per_hour": [] if history is None else _rows(history_per_hour(history), None),
        "counts": {name: df.count() for name, df in findings.items()},
        **{name: _rows(df) for name, df in findings.items()},
        "malformed_xids_advice": MALFORMED_XID_ADVICE,
        "thresholds": asdict(limits),
    }
    report["counts"]["messages"] = sum(d["depth"] for d in report["destinations"])
    report["counts"]["prepared_messages"] = sum(d["prepared"] for d in report["destinations"])
    report["violations"] = check(report, limits)
    msgs.unpersist()
    return report


def audit(
    spark: SparkSession,
    dsn: str,
    out_dir: str | os.PathLike[str],
    prefix: str = "",
    thresholds: Thresholds | None = None,
    *,
    archive: str | os.PathLike[str] | None = None,
    now_ms: int | None = None,
    prioritized: bool = False,
) -> dict[str, Any]:
    """Audit the store at ``dsn``; writes ``audit.json`` and ``audit.html`` into ``out_dir``.

    ``prioritized``: the store has ActiveMQ's prioritizedMessages (mqstore's
    ``MQSTORE_PRIORITIZED_MESSAGES``), which changes how subscription backlogs are counted
    (:func:`subscription_backlog`); off by default, as in ActiveMQ and mqstore.

    History throughput comes from the history of an export directory (``archive``, default
    ``out_dir``) of this database and prefix (:func:`.archive_guard.history_archive`, else
    :class:`ArchiveError`) when there is one, plus the ``mqstore_history`` rows it has not
    archived (by ``hist_id``): rows ``history trim --exported`` deleted are counted too.
    Beside ``mqstore_history``, only an archive that names its database is counted.
    Returns the report; its ``violations`` list is non-empty when a threshold is crossed.
    """
    src = jdbc_source(dsn, prefix)
    identity = inspect_database(dsn, prefix, ("ACTIVEMQ_MSGS", "ACTIVEMQ_ACKS", "ACTIVEMQ_LOCK"))
    archived = history_archive(out_dir, archive, identity, prefix)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    # No body is audited: dropping them keeps each body out of the cached rows. The key
    # inside MSG (the identity columns) comes from the same pass over each frame.
    msgs = with_decoded(read_msgs(spark, src), keep_msg=False, bodies=False, identity=True).drop(
        "text", "body"
    )
    history = None
    named = False  # whether the archive names its database
    columns = ("hist_id", "removed_at", "outcome")
    if archived is not None and any((archived / "history").rglob("*.parquet")):
        history = read_dataset(spark, archived / "history").select(*columns)
        named = has_identity(read_watermarks(archived) or {})
    if table_exists(spark, src, "MQSTORE_HISTORY"):
        table = read_table(spark, src, "MQSTORE_HISTORY").select(*columns)
        # Archived rows count once (`history trim --exported` deletes them from the table);
        # an archive that does not name its database (older builds) was never trimmed
        # against, and may be another database's: the table alone then, as before.
        if history is not None and named:
            table = table.join(history.select("hist_id"), "hist_id", "left_anti")
            table = history.unionByName(table)
        history = table
    report = build_report(
        msgs,
        read_acks(spark, src),
        read_lock(spark, src),
        history,
        now_ms=now,
        limits=thresholds or Thresholds(),
        row_lock=probe_row_lock(dsn, prefix),
        prioritized=prioritized,
    )
    report["prefix"] = prefix
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_atomically(out / "audit.json", json.dumps(report, indent=2, default=str, sort_keys=True))
    write_atomically(out / "audit.html", render(report))
    return report


__all__ = [
    "AGE_BUCKETS",
    "ANOMALIES",
    "BACKLOG_RULES",
    "SUBSCRIPTION_PRIORITIES",
    "Thresholds",
    "anomaly_summary",
    "audit",
    "build_report",
    "check",
    "container_mismatches",
    "destination_stats",
    "duplicate_message_ids",
    "durable_subscriptions",
    "expired_messages",
    "history_per_hour",
    "in_doubt",
    "lock_status",
    "malformed_xids",
    "msgid_mismatches",
    "orphan_subscriptions",
    "priority_out_of_range",
    "subscription_backlog",
    "undecodable",
]
