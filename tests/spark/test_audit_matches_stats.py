"""The audit shows what `mqstore stats` shows for the same database: depths and backlogs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from mqstore.store import Batch, PostgresStore, Removal, SubscriptionKey, Xid
from spark_etl.audit import audit
from tests.integration.conftest import msg
from tests.integration.test_cli import mqstore
from tests.spark.conftest import dsn_of, execute

NOW = 1795400000000
Q, T = "queue://xa.Q", "topic://xa.T"


def _stats(engine: Engine, tmp_path: Path) -> dict[str, Any]:
    """``mqstore stats --json`` of ``engine``'s database."""
    shown = mqstore(
        "stats", "--json", "--dsn", dsn_of(engine), "--data-dir", str(tmp_path / "none")
    )
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


def _backlogs(report: dict[str, Any], stats: dict[str, Any]) -> tuple[dict[Any, int], ...]:
    """Backlog per (topic, client id, name): the audit's, then ``mqstore stats``'."""
    return (
        {(s["container"], s["client_id"], s["sub_name"]): s["backlog"]
         for s in report["subscriptions"]},
        {(s["topic"], s["client_id"], s["name"]): s["backlog"] for s in stats["subscriptions"]},
    )  # fmt: skip


@pytest.mark.parametrize("prioritized", [False, True], ids=["one-row", "row-per-priority"])
def test_xa_prepared_rows_are_not_in_depths_and_are_shown_apart(
    spark: Any, engine: Engine, tmp_path: Path, prioritized: bool
) -> None:
    """A prepared add is not in its queue yet and a prepared removal is no longer in it, for
    ActiveMQ (``XID IS NULL`` in its count) and ``mqstore stats``: the audit's depth agrees,
    and counts those rows apart as ``prepared``."""
    store = PostgresStore(engine, prioritized=prioritized, cleanup_interval_s=0)
    store.start()
    sub = SubscriptionKey(T, "client", "sub")
    try:
        store.add_subscription(sub)
        queued = store.add([msg(Q, n, priority=n) for n in (1, 2, 3)])
        store.add([msg(T, n, priority=n) for n in (1, 2)])
        store.xa_prepare(
            Xid(1, b"g1", b"b"),
            Batch(adds=[msg(Q, 4), msg(Q, 5), msg(T, 3)], removes=[Removal(Q, queued[0])]),
        )
    finally:
        store.stop()
    stats = _stats(engine, tmp_path)
    report = audit(spark, dsn_of(engine), tmp_path / "audit", now_ms=NOW)
    depths = {d["destination"]: d["depth"] for d in report["destinations"]}
    assert depths == stats["destinations"] == {Q: 2, T: 2}
    assert {d["destination"]: d["prepared"] for d in report["destinations"]} == {Q: 3, T: 1}
    audited, shown = _backlogs(report, stats)
    assert audited == shown == {(T, "client", "sub"): 2}
    assert (report["counts"]["messages"], report["counts"]["prepared_messages"]) == (4, 4)
    assert report["counts"]["in_doubt"] == 4


def test_a_subscription_row_without_last_acked_id_has_no_backlog(
    spark: Any, activemq_engine: Engine, tmp_path: Path
) -> None:
    """``M.ID > D.LAST_ACKED_ID`` matches nothing when LAST_ACKED_ID is NULL, in ActiveMQ's
    count and in ``mqstore stats``: the audit shows the same backlogs."""
    execute(
        activemq_engine, "UPDATE activemq_acks SET last_acked_id = NULL WHERE sub_name = 'subB'"
    )
    stats = _stats(activemq_engine, tmp_path)
    report = audit(spark, dsn_of(activemq_engine), tmp_path / "audit", now_ms=NOW)
    audited, shown = _backlogs(report, stats)
    fixture = "topic://FIXTURE.T"
    assert (
        audited == shown == {(fixture, "fix-sub-a", "subA"): 2, (fixture, "fix-sub-b", "subB"): 0}
    )


def test_a_subscription_row_counts_the_messages_of_its_priority(
    spark: Any, activemq_engine: Engine, tmp_path: Path
) -> None:
    """Rows stored with another PRIORITY (by a broker with ``prioritizedMessages``) are not
    pending for a subscription whose only ACKS row has PRIORITY 0: ``mqstore stats``, the
    store's own delivery and ActiveMQ's prioritized count all match ``M.PRIORITY =
    D.PRIORITY``, and the audit shows the same backlogs."""
    execute(activemq_engine, "UPDATE activemq_msgs SET priority = 4 WHERE id IN (10, 11)")
    stats = _stats(activemq_engine, tmp_path)
    report = audit(spark, dsn_of(activemq_engine), tmp_path / "audit", now_ms=NOW)
    audited, shown = _backlogs(report, stats)
    fixture = "topic://FIXTURE.T"
    assert (
        audited == shown == {(fixture, "fix-sub-a", "subA"): 0, (fixture, "fix-sub-b", "subB"): 3}
    )
