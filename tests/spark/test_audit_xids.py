"""The audit names the rows whose XID mqstore's XA recovery refuses, and says what to do.

``xa_recover`` refuses to list the prepared transactions while a row of ACTIVEMQ_MSGS or
ACTIVEMQ_ACKS holds an XID that is not ActiveMQ's encoding of prepared work: the audit reads
each XID as that recovery does, so an operator learns of such rows before a transaction
manager meets the refusal.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import typer
from sqlalchemy.engine import Engine
from typer.testing import CliRunner

from mqstore.errors import TransactionError
from mqstore.store import Ack, Batch, PostgresStore, SubscriptionKey, Xid
from spark_etl import cli
from spark_etl.audit import Thresholds, audit
from spark_etl.xids import MALFORMED_XID_ADVICE
from tests.integration.conftest import msg
from tests.spark.conftest import dsn_of, execute
from tests.spark.test_audit import _KeepAlive

NOW = 1795310000000
Q, T = "queue://xa.Q", "topic://xa.T"
#: A prepared add as ActiveMQ writes it, with '*' for its '+' marker.
BAD_MARKER = base64.b64encode(b"*" + base64.b64decode(Xid(1, b"g", b"b").encode("+"))[1:])


def _prepare_and_damage(engine: Engine) -> tuple[int, int]:
    """One prepared XA transaction (an add) in a store, then three rows whose XID is not
    ActiveMQ's encoding: a queue row with '', one with a '*' marker, and the subscription's
    ACKS row with text. Returns the IDs of the two queue rows."""
    store = PostgresStore(engine, cleanup_interval_s=0)
    store.start()
    try:
        store.add_subscription(SubscriptionKey(T, "client", "sub"))
        first, second = store.add([msg(Q, 1), msg(Q, 2)])
        store.xa_prepare(Xid(1, b"g1", b"b"), Batch(adds=[msg(Q, 3)]))
    finally:
        store.stop()
    execute(engine, "UPDATE activemq_msgs SET xid = '' WHERE id = :i", {"i": first})
    execute(
        engine,
        "UPDATE activemq_msgs SET xid = :x WHERE id = :i",
        {"x": BAD_MARKER.decode(), "i": second},
    )
    execute(engine, "UPDATE activemq_acks SET xid = 'in-doubt?' WHERE client_id = 'client'")
    return first, second


def _recover(engine: Engine) -> list[Any]:
    """The prepared transactions a store lists."""
    store = PostgresStore(engine, cleanup_interval_s=0)
    store.start()
    try:
        return store.xa_recover()
    finally:
        store.stop()


def test_xids_xa_recovery_refuses_are_listed_counted_and_cross_their_threshold(
    spark: Any, engine: Engine, tmp_path: Path
) -> None:
    first, second = _prepare_and_damage(engine)
    with pytest.raises(TransactionError, match="3 row"):
        _recover(engine)
    limits = Thresholds(max_malformed_xids=0)
    report = audit(spark, dsn_of(engine), tmp_path, thresholds=limits, now_ms=NOW)
    assert report["counts"]["in_doubt"] == 4  # the prepared add, and the three rows
    assert report["counts"]["malformed_xids"] == 3
    acks = {"id": None, "client_id": "client", "sub_name": "sub", "priority": 0}
    msgs = {"client_id": None, "sub_name": None, "priority": None}
    assert report["malformed_xids"] == [
        {
            "table": "acks",
            "destination": T,
            **acks,
            "xid": "in-doubt?",
            "problem": "not base64 text (standard alphabet, with padding)",
        },
        {
            "table": "msgs",
            "destination": Q,
            "id": first,
            **msgs,
            "xid": "",
            "problem": "empty (a row outside XA has a NULL XID, not '')",
        },
        {
            "table": "msgs",
            "destination": Q,
            "id": second,
            **msgs,
            "xid": BAD_MARKER.decode(),
            "problem": "marker byte 0x2a, neither '+' (add) nor '-' (remove)",
        },
    ]
    assert report["malformed_xids_advice"] == MALFORMED_XID_ADVICE
    assert "set its XID to NULL" in MALFORMED_XID_ADVICE
    assert report["violations"] == ["malformed XA XIDs: 3 > 0"]
    page = (tmp_path / "audit.html").read_text()
    assert "Malformed XIDs (3)" in page and "set its XID to NULL" in page
    # As the advice says: these rows are not prepared work; recovery lists the one that is.
    execute(
        engine,
        "UPDATE activemq_msgs SET xid = NULL WHERE id IN (:a, :b)",
        {"a": first, "b": second},
    )
    execute(engine, "UPDATE activemq_acks SET xid = NULL WHERE client_id = 'client'")
    assert [t.xid for t in _recover(engine)] == [Xid(1, b"g1", b"b")]


def test_in_doubt_rows_name_a_prepared_durable_ack_by_its_subscription(
    spark: Any, engine: Engine, tmp_path: Path
) -> None:
    """A prepared ack is the subscription's ACKS row with an XID; its LAST_ACKED_ID is still
    the committed position. The in-doubt list names that row by its key, as the operator
    needs it to find the row, and a prepared add by its ID."""
    key = SubscriptionKey(T, "client", "sub")
    store = PostgresStore(engine, cleanup_interval_s=0)
    store.start()
    try:
        store.add_subscription(key)
        first, second = store.add([msg(T, 1), msg(T, 2)])
        store.acknowledge([Ack(key, first)])
        store.xa_prepare(Xid(1, b"ack", b"b"), Batch(acks=[Ack(key, second)]))
        store.xa_prepare(Xid(1, b"add", b"b"), Batch(adds=[msg(Q, 3)]))
    finally:
        store.stop()
    report = audit(spark, dsn_of(engine), tmp_path, now_ms=NOW)
    rows = [{k: v for k, v in r.items() if k != "xid"} for r in report["in_doubt"]]
    assert rows == [
        {
            "table": "acks",
            "destination": T,
            "id": None,
            "client_id": "client",
            "sub_name": "sub",
            "priority": 0,
            "last_acked_id": first,
        },
        {
            "table": "msgs",
            "destination": Q,
            "id": rows[1]["id"],
            "client_id": None,
            "sub_name": None,
            "priority": None,
            "last_acked_id": None,
        },
    ]
    assert rows[1]["id"] > second
    assert report["counts"]["malformed_xids"] == 0
    page = (tmp_path / "audit.html").read_text()
    assert "<th>last_acked_id</th>" in page and "<td>client</td>" in page


def test_audit_command_warns_of_xids_xa_recovery_refuses_and_exits_3_over_the_limit(
    spark: Any, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _prepare_and_damage(engine)
    monkeypatch.setattr(cli, "_session", lambda *_args: _KeepAlive(spark))
    app = typer.Typer()
    cli.register(app)
    out = tmp_path / "audit"
    env = {"MQSTORE_DSN": dsn_of(engine), "MQSTORE_TABLE_PREFIX": ""}
    ran = CliRunner().invoke(
        app, ["audit", "--out", str(out), "--max-malformed-xids", "2"], env=env
    )
    assert ran.exit_code == cli.EXIT_THRESHOLD, ran.output
    assert "threshold crossed: malformed XA XIDs: 3 > 2" in ran.output
    assert (
        f"3 row(s) hold an XID that is not ActiveMQ's encoding of prepared XA work "
        f"(malformed_xids in {out / 'audit.json'}): {MALFORMED_XID_ADVICE}"
    ) in ran.output
