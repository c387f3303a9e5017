"""The audit shows what `mqstore stats` shows for the same database: depths and backlogs.

Both read the store's mode from the same setting, ``MQSTORE_PRIORITIZED_MESSAGES``: plain
(ActiveMQ's default) counts a subscription's backlog as every message after the least
LAST_ACKED_ID of its ACKS rows, prioritized counts per priority against the row of that
priority. Each comparison runs in both modes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import typer
from sqlalchemy.engine import Engine
from typer.testing import CliRunner

from mqstore.store import Batch, PostgresStore, Removal, SubscriptionKey, Xid
from spark_etl import cli
from tests.integration.conftest import msg
from tests.integration.test_cli import mqstore
from tests.spark.conftest import dsn_of, execute
from tests.spark.test_audit import _KeepAlive

Q, T = "queue://xa.Q", "topic://xa.T"
FIXTURE_T = "topic://FIXTURE.T"
SUB_A, SUB_B = (FIXTURE_T, "fix-sub-a", "subA"), (FIXTURE_T, "fix-sub-b", "subB")

modes = pytest.mark.parametrize("prioritized", [False, True], ids=["plain", "prioritized"])


def _setting(prioritized: bool) -> dict[str, str]:
    return {"MQSTORE_PRIORITIZED_MESSAGES": "true" if prioritized else "false"}


def _stats(engine: Engine, tmp_path: Path, prioritized: bool) -> dict[str, Any]:
    """``mqstore stats --json`` of ``engine``'s database, in the store's mode."""
    shown = mqstore(
        "stats",
        "--json",
        "--dsn",
        dsn_of(engine),
        "--data-dir",
        str(tmp_path / "none"),
        env={**os.environ, **_setting(prioritized)},
    )
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


def _audit(
    spark: Any,
    engine: Engine,
    tmp_path: Path,
    prioritized: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    """``mqstore audit`` of ``engine``'s database, in the store's mode (the shared session
    runs it): its ``audit.json``."""
    monkeypatch.setattr(cli, "_session", lambda *_args: _KeepAlive(spark))
    app = typer.Typer()
    cli.register(app)
    out = tmp_path / "audit"
    env = {"MQSTORE_DSN": dsn_of(engine), "MQSTORE_TABLE_PREFIX": "", **_setting(prioritized)}
    ran = CliRunner().invoke(app, ["audit", "--out", str(out)], env=env)
    assert ran.exit_code == 0, ran.output
    mode = "prioritized" if prioritized else "plain"
    assert f"(backlog: {mode})" in ran.output
    report = dict(json.loads((out / "audit.json").read_text()))
    assert report["backlog_rule"]["mode"] == mode
    assert report["backlog_rule"]["prioritized_messages"] is prioritized
    assert f"Backlog counted as a {mode} store" in (out / "audit.html").read_text()
    return report


def _backlogs(report: dict[str, Any], stats: dict[str, Any]) -> tuple[dict[Any, int], ...]:
    """Backlog per (topic, client id, name): the audit's, then ``mqstore stats``'."""
    return (
        {(s["container"], s["client_id"], s["sub_name"]): s["backlog"]
         for s in report["subscriptions"]},
        {(s["topic"], s["client_id"], s["name"]): s["backlog"] for s in stats["subscriptions"]},
    )  # fmt: skip


@modes
def test_xa_prepared_rows_are_not_in_depths_and_are_shown_apart(
    spark: Any, engine: Engine, tmp_path: Path, prioritized: bool, monkeypatch: pytest.MonkeyPatch
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
    stats = _stats(engine, tmp_path, prioritized)
    report = _audit(spark, engine, tmp_path, prioritized, monkeypatch)
    depths = {d["destination"]: d["depth"] for d in report["destinations"]}
    assert depths == stats["destinations"] == {Q: 2, T: 2}
    assert {d["destination"]: d["prepared"] for d in report["destinations"]} == {Q: 3, T: 1}
    audited, shown = _backlogs(report, stats)
    assert audited == shown == {(T, "client", "sub"): 2}
    assert (report["counts"]["messages"], report["counts"]["prepared_messages"]) == (4, 4)
    assert report["counts"]["in_doubt"] == 4


@modes
def test_a_subscription_row_without_last_acked_id_has_no_backlog(
    spark: Any,
    activemq_engine: Engine,
    tmp_path: Path,
    prioritized: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``M.ID > D.LAST_ACKED_ID`` matches nothing when LAST_ACKED_ID is NULL, in ActiveMQ's
    count and in ``mqstore stats``, in either mode: the audit shows the same backlogs."""
    execute(
        activemq_engine, "UPDATE activemq_acks SET last_acked_id = NULL WHERE sub_name = 'subB'"
    )
    stats = _stats(activemq_engine, tmp_path, prioritized)
    report = _audit(spark, activemq_engine, tmp_path, prioritized, monkeypatch)
    audited, shown = _backlogs(report, stats)
    assert audited == shown == {SUB_A: 2, SUB_B: 0}


@pytest.mark.parametrize(
    ("prioritized", "backlogs"),
    [(False, {SUB_A: 2, SUB_B: 5}), (True, {SUB_A: 0, SUB_B: 3})],
    ids=["plain", "prioritized"],
)
def test_a_one_row_subscription_counts_every_priority_unless_the_store_is_prioritized(
    spark: Any,
    activemq_engine: Engine,
    tmp_path: Path,
    prioritized: bool,
    backlogs: dict[Any, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Messages 10 and 11 stored with PRIORITY 4 (by a broker with ``prioritizedMessages``)
    are pending for the PRIORITY-0 rows in a plain store, as ActiveMQ's statements without
    PRIORITY and ``mqstore stats`` count them; a prioritized store counts them only against
    a row of PRIORITY 4, which neither subscription has."""
    execute(activemq_engine, "UPDATE activemq_msgs SET priority = 4 WHERE id IN (10, 11)")
    stats = _stats(activemq_engine, tmp_path, prioritized)
    report = _audit(spark, activemq_engine, tmp_path, prioritized, monkeypatch)
    audited, shown = _backlogs(report, stats)
    assert audited == shown == backlogs


@pytest.mark.parametrize(
    ("prioritized", "backlogs"), [(False, (2, 5)), (True, (1, 3))], ids=["plain", "prioritized"]
)
def test_a_subscription_with_a_row_per_priority_counts_by_the_store_mode(
    spark: Any,
    engine: Engine,
    tmp_path: Path,
    prioritized: bool,
    backlogs: tuple[int, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Messages 1 to 3 have PRIORITY 0, 4 and 5 PRIORITY 4; each subscription has ten ACKS
    rows, as a broker with ``prioritizedMessages`` writes them. ``a`` has acknowledged up
    to 3, and up to 4 at PRIORITY 4; ``b`` nothing, and its PRIORITY 4 row holds NULL.
    Plain, a subscription resumes after the least LAST_ACKED_ID of its rows (a NULL one
    aside): ``a`` has 4 and 5 pending, ``b`` all five. Prioritized, each row counts the
    messages of its priority after its own LAST_ACKED_ID: ``a`` 5, ``b`` 1 to 3."""
    store = PostgresStore(engine, prioritized=True, cleanup_interval_s=0)
    store.start()
    subs = {name: SubscriptionKey(T, "client", name) for name in ("a", "b")}
    try:
        for sub in subs.values():
            store.add_subscription(sub)
        ids = store.add([msg(T, n, priority=0 if n <= 3 else 4) for n in (1, 2, 3, 4, 5)])
    finally:
        store.stop()
    positions = {("a", None): ids[2], ("a", 4): ids[3], ("b", None): 0, ("b", 4): None}
    for (name, priority), last in positions.items():
        execute(
            engine,
            "UPDATE activemq_acks SET last_acked_id = :last WHERE container = :t"
            " AND sub_name = :name AND (CAST(:p AS bigint) IS NULL OR priority = :p)",
            {"last": last, "t": T, "name": name, "p": priority},
        )
    stats = _stats(engine, tmp_path, prioritized)
    report = _audit(spark, engine, tmp_path, prioritized, monkeypatch)
    audited, shown = _backlogs(report, stats)
    expected = {(T, "client", name): n for name, n in zip(subs, backlogs, strict=True)}
    assert audited == shown == expected
