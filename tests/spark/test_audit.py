"""Audit figures on the ActiveMQ fixture equal hand-computed ones; the HTML report renders."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
from sqlalchemy.engine import Engine
from typer.testing import CliRunner

from mqstore.store import Ack, Batch, PostgresStore, SubscriptionKey, Xid
from spark_etl import cli
from spark_etl.audit import Thresholds, audit, destination_stats, subscription_backlog
from tests.integration.conftest import msg
from tests.spark.conftest import dsn_of, execute

NOW = 1795310000000  # an hour after the fixture was written; before any EXPIRATION
Q, T = "queue://FIXTURE.Q", "topic://FIXTURE.T"


def test_fixture_figures(spark: Any, activemq_engine: Engine, tmp_path: Path) -> None:
    report = audit(spark, dsn_of(activemq_engine), tmp_path, now_ms=NOW)
    depth = {d["destination"]: d["depth"] for d in report["destinations"]}
    assert depth == {Q: 12, T: 5}
    oldest = {d["destination"]: d["oldest_timestamp"] for d in report["destinations"]}
    assert oldest == {Q: 1795306859007, T: 1795306859779}
    assert sum(report["destinations"][0][f"age{b}"] for b in report["age_buckets"]) == 12
    subs = {s["sub_name"]: s for s in report["subscriptions"]}
    assert (subs["subA"]["backlog"], subs["subA"]["first_pending_id"]) == (2, 10)  # T4, T5
    assert (subs["subB"]["backlog"], subs["subB"]["first_pending_id"]) == (5, 7)  # T1..T5
    assert subs["subA"]["oldest_pending_age_ms"] == NOW - 1795306859802  # T4's timestamp
    assert subs["subB"]["oldest_pending_age_ms"] == NOW - 1795306859779  # T1's timestamp
    assert report["lock"] == {
        "present": True,
        "state": "free",
        "holder": None,
        "lease_time": 0,
        "lease_age_ms": None,
        "journaled": False,
        "row_lock": False,
        "row_lock_error": None,
    }
    assert report["counts"] == {
        "messages": 17,
        "prepared_messages": 0,
        "expired": 0,
        "in_doubt": 0,
        "malformed_xids": 0,
        "orphan_subscriptions": 0,
        "duplicate_message_ids": 0,
        "undecodable": 0,
        "priority_out_of_range": 0,
        "container_mismatches": 0,
        "msgid_mismatches": 0,
    }
    assert report["history_per_hour"] == []
    assert report["violations"] == []
    on_disk = json.loads((tmp_path / "audit.json").read_text())
    assert on_disk["subscriptions"] == json.loads(json.dumps(report["subscriptions"]))
    assert (tmp_path / "audit.html").stat().st_size > 1000


def test_destination_records_are_not_subscriptions(
    spark: Any, activemq_engine: Engine, tmp_path: Path
) -> None:
    # ActiveMQ's doRecordDestination: PRIORITY 11, CLIENT_ID = SUB_NAME = the queue's name.
    for queue in (Q, "queue://VT.EMPTY"):
        execute(
            activemq_engine,
            "INSERT INTO activemq_acks (container, sub_dest, client_id, sub_name, selector,"
            " last_acked_id, priority) VALUES (:q, :q, :q, :q, NULL, 0, 11)",
            {"q": queue},
        )
    limits = Thresholds(max_backlog=10)
    report = audit(spark, dsn_of(activemq_engine), tmp_path, thresholds=limits, now_ms=NOW)
    assert {s["sub_name"]: s["backlog"] for s in report["subscriptions"]} == {"subA": 2, "subB": 5}
    assert report["orphan_subscriptions"] == [] and report["counts"]["orphan_subscriptions"] == 0
    assert report["violations"] == []


def _break_things(engine: Engine) -> None:
    """Add one of every anomaly the audit looks for."""
    execute(
        engine,
        "INSERT INTO activemq_msgs VALUES (30, 'queue://BROKEN', 'ID:x-1-2-3:1:1', 1, 0,"
        " '\\x000000051c01020304'::bytea, 0, NULL)",
    )
    execute(
        engine,
        "INSERT INTO activemq_msgs VALUES (33, 'queue://BROKEN', 'ID:x-1-2-3:1:1', 2, 0,"
        " NULL, 0, NULL)",
    )
    execute(engine, "UPDATE activemq_msgs SET priority = 12 WHERE id = 4")
    execute(engine, "UPDATE activemq_msgs SET msgid_seq = 99 WHERE id = 6")
    for new_id, old_id, container, expiration, xid in (
        (31, 2, "queue://DUP.Q", 1, None),
        (32, 3, "queue://DUP.Q", 0, "XID:1:abcd:ef"),
    ):
        execute(
            engine,
            "INSERT INTO activemq_msgs SELECT :n, :c, msgid_prod, msgid_seq, :e, msg, priority, :x"
            " FROM activemq_msgs WHERE id = :o",
            {"n": new_id, "c": container, "e": expiration, "x": xid, "o": old_id},
        )
    execute(
        engine,
        "INSERT INTO activemq_acks VALUES ('topic://EMPTY.T', 'topic://EMPTY.T', 'c', 's',"
        " NULL, 0, 0, NULL)",
    )
    execute(engine, f"UPDATE activemq_lock SET broker_name = 'brk-a', time = {NOW + 5000}")


def test_anomalies_and_thresholds(spark: Any, activemq_engine: Engine, tmp_path: Path) -> None:
    _break_things(activemq_engine)
    limits = Thresholds(max_undecodable=0, max_backlog=4, max_depth=20)
    report = audit(spark, dsn_of(activemq_engine), tmp_path, thresholds=limits, now_ms=NOW)
    assert report["counts"] == {
        "messages": 20,  # the in-doubt row of DUP.Q is not in its depth
        "prepared_messages": 1,
        "expired": 1,
        "in_doubt": 1,
        "malformed_xids": 1,  # 'XID:1:abcd:ef' is not ActiveMQ's encoding
        "orphan_subscriptions": 1,
        "duplicate_message_ids": 2,
        "undecodable": 2,  # a corrupt MSG and a NULL one
        "priority_out_of_range": 1,
        "container_mismatches": 2,  # FIXTURE.Q's messages stored as DUP.Q's
        "msgid_mismatches": 1,
    }
    assert report["priority_out_of_range"] == [{"id": 4, "destination": Q, "priority": 12}]
    assert [
        (m["id"], m["destination"], m["msg_container"]) for m in report["container_mismatches"]
    ] == [(31, "queue://DUP.Q", Q), (32, "queue://DUP.Q", Q)]
    [moved] = report["msgid_mismatches"]
    assert (moved["id"], moved["msgid_seq"]) == (6, 99)
    assert moved["msg_msgid_prod"] == moved["msgid_prod"] and moved["msg_msgid_seq"] != 99
    assert [e["id"] for e in report["expired"]] == [31]
    assert report["in_doubt"] == [
        {
            "table": "msgs",
            "destination": "queue://DUP.Q",
            "id": 32,
            "client_id": None,
            "sub_name": None,
            "priority": None,
            "last_acked_id": None,
            "xid": "XID:1:abcd:ef",
        }
    ]
    assert report["orphan_subscriptions"] == [
        {"container": "topic://EMPTY.T", "client_id": "c", "sub_name": "s"}
    ]
    assert [d["ids"] for d in report["duplicate_message_ids"]] == [[2, 31], [3, 32]]
    assert [u["id"] for u in report["undecodable"]] == [30, 33]
    assert "offset" in report["undecodable"][0]["decode_error"]
    assert report["undecodable"][1]["decode_error"] == "MSG is NULL"
    assert report["lock"]["holder"] == "brk-a"
    assert report["lock"]["lease_age_ms"] == -5000
    subs = {s["sub_name"]: s["backlog"] for s in report["subscriptions"]}
    assert subs == {"subA": 2, "subB": 5, "s": 0}  # the in-doubt row is not deliverable
    assert report["violations"] == [
        "backlog of topic://FIXTURE.T fix-sub-b/subB: 5 > 4",
        "undecodable messages: 2 > 0",
    ]


class _KeepAlive:
    """The shared session, minus ``stop()`` (the CLI stops its session when done)."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spark, name)

    def stop(self) -> None:
        pass


def test_cli_exit_codes_and_summary(
    spark: Any, activemq_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "_session", lambda *_args: _KeepAlive(spark))
    app = typer.Typer()
    cli.register(app)
    runner = CliRunner()
    env = {"MQSTORE_DSN": dsn_of(activemq_engine), "MQSTORE_TABLE_PREFIX": ""}
    ok = runner.invoke(app, ["audit", "--out", str(tmp_path / "a")], env=env)
    assert ok.exit_code == 0, ok.output
    assert "anomalies" not in ok.output
    crossed = runner.invoke(
        app, ["audit", "--out", str(tmp_path / "b"), "--max-depth", "10"], env=env
    )
    assert crossed.exit_code == cli.EXIT_THRESHOLD
    assert "depth of queue://FIXTURE.Q: 12 > 10" in crossed.output
    exported = runner.invoke(app, ["export", "--out", str(tmp_path / "x")], env=env)
    assert exported.exit_code == 0, exported.output
    assert "queue://FIXTURE.Q" in exported.output and "17" in exported.output
    bad = runner.invoke(app, ["export", "--out", str(tmp_path / "y"), "--dsn", "mysql://h/db"])
    assert bad.exit_code == 1 and "invalid DSN" in bad.output
    _break_things(activemq_engine)
    told = runner.invoke(app, ["audit", "--out", str(tmp_path / "c")], env=env)
    assert told.exit_code == 0, told.output  # no thresholds: anomalies are told, not failed
    assert (
        "anomalies: 1 expired, 1 in-doubt XA, 1 malformed XID, 1 orphan subscription, "
        "2 duplicate JMS id, 2 undecodable, 1 PRIORITY outside 0-9, "
        "2 CONTAINER not MSG's destination, 1 MSGID_PROD/SEQ not MSG's id; "
    ) in told.output
    crossed = runner.invoke(
        app,
        ["audit", "--out", str(tmp_path / "d"), "--max-priority-out-of-range", "0",
         "--max-container-mismatches", "1", "--max-msgid-mismatches", "0"],
        env=env,
    )  # fmt: skip
    assert crossed.exit_code == cli.EXIT_THRESHOLD
    assert "PRIORITY outside 0 to 9: 1 > 0" in crossed.output
    assert "CONTAINER differing from MSG's destination: 2 > 1" in crossed.output
    assert "MSGID_PROD/MSGID_SEQ differing from MSG's message id: 1 > 0" in crossed.output


def test_html_report_renders_in_headless_chromium(
    spark: Any, activemq_engine: Engine, tmp_path: Path
) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser is not None, "chromium is not installed: apt-get install chromium"
    _break_things(activemq_engine)
    audit(spark, dsn_of(activemq_engine), tmp_path, now_ms=NOW)
    page = tmp_path / "audit.html"
    source = page.read_text()
    assert "<script" not in source and "http://" not in source.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    dom = subprocess.run(
        [browser, *flags, "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert dom.count("<svg") == 4
    assert dom.count("<rect") >= 10
    for title in ("Depth per destination", "Age distribution per destination", "Backlog per"):
        assert title in dom
    shot = tmp_path / "audit.png"
    subprocess.run(
        [browser, *flags, f"--screenshot={shot}", "--window-size=1200,2400", page.as_uri()],
        capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    assert shot.stat().st_size > 10_000


@pytest.mark.parametrize("prioritized", [False, True], ids=["one-row", "row-per-priority"])
def test_a_subscription_with_an_xa_prepared_ack_keeps_its_backlog(
    spark: Any, engine: Engine, tmp_path: Path, prioritized: bool
) -> None:
    store = PostgresStore(engine, prioritized=prioritized, cleanup_interval_s=0)
    store.start()
    sub = SubscriptionKey("topic://xa", "client", "sub")
    try:
        store.add_subscription(sub)
        ids = store.add([msg(sub.container, n, priority=9 if n == 1 else 4) for n in (1, 2, 3)])
        store.xa_prepare(Xid(1, b"g", b"b"), Batch(acks=[Ack(sub, ids[0], priority=9)]))
        assert store.pending_count(sub) == 3  # prepared, not committed
    finally:
        store.stop()
    report = audit(spark, dsn_of(engine), tmp_path, now_ms=1795400000000)
    assert {s["sub_name"]: s["backlog"] for s in report["subscriptions"]} == {"sub": 3}


def test_messages_without_a_jms_timestamp_have_an_unknown_age(spark: Any) -> None:
    """A producer with ``disableMessageTimestamp`` stores JMSTimestamp 0: such a message's
    age is unknown, not zero (it may be the oldest of all)."""
    msgs = spark.createDataFrame(
        [(1, Q, 0, NOW - 7_200_000, None), (2, Q, 0, 0, None), (3, T, 0, 0, None)],
        "id bigint, container string, store_priority int, timestamp bigint, xid string",
    )
    acks = spark.createDataFrame(
        [(T, "c", "s", None, 0, 0, None)],
        "container string, client_id string, sub_name string, selector string,"
        " last_acked_id bigint, priority int, xid string",
    )
    [stats] = [r.asDict() for r in destination_stats(msgs, NOW).where(f"destination = '{Q}'")
               .collect()]  # fmt: skip
    assert (stats["age<1m"], stats["age<1d"], stats["ageunknown"]) == (0, 1, 1)
    assert stats["age_p50_ms"] == stats["age_max_ms"] == 7_200_000
    [sub] = subscription_backlog(acks, msgs, NOW).collect()
    assert (sub["backlog"], sub["oldest_pending_age_ms"]) == (1, None)


def test_a_journaled_lease_is_reported_by_its_end_and_kept_once_overdue(spark: Any) -> None:
    from mqstore.lease_time import encode_lease_time
    from spark_etl.audit import lock_status

    end = NOW + 3000
    row = spark.createDataFrame(
        [(1, encode_lease_time(end, journaled=True), "jm")],
        "id long, time long, broker_name string",
    )
    held = lock_status(row, NOW)
    assert (held["state"], held["holder"], held["journaled"]) == (
        "held (journaled lease)",
        "jm",
        True,
    )
    assert (held["lease_time"], held["lease_age_ms"]) == (end, -3000)
    kept = lock_status(row, end + 60_000)  # its broker stopped renewing: no one takes it over
    assert (kept["state"], kept["lease_age_ms"]) == ("kept (journaled)", 60_000)
