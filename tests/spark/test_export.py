"""Export of a real ActiveMQ 5.17 database to Parquet: decoding, increments, re-runs, crashes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from mqstore import takeover
from mqstore.openwire import bytes_message, decode, encode, text_message
from mqstore.schema import build_schema
from spark_etl import export as export_mod
from spark_etl import history as history_mod
from spark_etl.audit import audit
from spark_etl.export import export, load_watermarks
from spark_etl.sources import jdbc_source, read_msgs
from tests.spark.conftest import dsn_of, execute, fetch

Q, T = "queue://FIXTURE.Q", "topic://FIXTURE.T"
STOMP, OW = "ID:vm-43775-1795306854999-3", "ID:vm-38831-1795306860829-1"
# EXPECTED.md, one tuple per ACTIVEMQ_MSGS row:
# (id, container, JMSMessageID, kind, JMSPriority, expiration, correlation, type, properties,
#  text body, content bytes as hex)
FIXTURE_ROWS: list[tuple[Any, ...]] = [
    (1, Q, f"{STOMP}:4:-1:1:1", "text", 0, 0, None, None,
     {"fixture_tag": "S1", "num_as_str": "17", "str_prop": "alpha"}, "stomp text p0",
     "0000000d73746f6d702074657874207030"),
    (2, Q, f"{STOMP}:4:-1:1:2", "text", 4, 0, None, None,
     {"fixture_tag": "S2", "flag": "true", "str_prop": "beta"}, "stomp text p4",
     "0000000d73746f6d702074657874207034"),
    (3, Q, f"{STOMP}:4:-1:1:3", "text", 9, 0, None, None,
     {"fixture_tag": "S3", "str_prop": "gamma"}, "stomp text p9",
     "0000000d73746f6d702074657874207039"),
    (4, Q, f"{STOMP}:4:-1:1:4", "text", 4, 2110666859005, "corr-stomp-0001",
     "fixture.type.stomp", {"fixture_tag": "S4"}, "stomp text p4 corr/type/expires",
     "0000001f73746f6d70207465787420703420636f72722f747970652f65787069726573"),
    (5, Q, f"{STOMP}:4:-1:1:5", "text", 4, 0, None, None, {"fixture_tag": "S5"},
     "utf8 text: héllo ✓", "000000157574663820746578743a2068c3a96c6c6f20e29c93"),
    (6, Q, f"{STOMP}:4:-1:1:6", "bytes", 4, 0, None, None,
     {"fixture_tag": "S6", "kind": "bytes"}, None, "00102030405060708090a0b0c0d0e0f000ff"),
    *[
        (6 + n, T, f"{STOMP}:5:-1:1:{n}", "text", 4, 0, None, None,
         {"fixture_tag": f"T{n}", "seq": str(n)}, f"topic msg {n}",
         "0000000b746f706963206d7367203" + str(n))
        for n in range(1, 6)
    ],
    (12, Q, f"{OW}:1:1:1:1", "text", 0, 0, None, None,
     {"bool_prop": "true", "double_prop": "2.5", "int_prop": "42",
      "long_prop": "1234567890123", "str_prop": "hello world"}, "ow text p0 typed props",
     "000000166f7720746578742070302074797065642070726f7073"),
    (13, Q, f"{OW}:1:1:1:2", "text", 4, 0, None, None, {"int_prop": "-7"},
     "ow text p4 default", "000000126f7720746578742070342064656661756c74"),
    (14, Q, f"{OW}:1:1:1:3", "text", 9, 2110666861286, "corr-ow-0001", "fixture.type.ow",
     {"bool_prop": "false"}, "ow text p9 corr/type/ttl",
     "000000186f77207465787420703920636f72722f747970652f74746c"),
    (15, Q, f"{OW}:1:1:1:4", "bytes", 4, 0, None, None, {"kind": "bytes"}, None,
     "00112233445566778899aabbccddeeff"),
    (16, Q, f"{OW}:1:1:1:5", "map", 4, 0, None, None, {}, None,
     "00000006000162010100017309000a6d617020737472696e6700016407400c000000000000000169050000"
     "002a00037261770a0000000301020300016c060020000000000001"),
    (17, Q, f"{OW}:1:1:1:6", "stream", 4, 0, None, None, {}, None,
     "09000d73747265616d20737472696e6705000000070100"),
]  # fmt: skip


def _messages(spark: Any, out: Path) -> dict[int, dict[str, Any]]:
    rows = spark.read.parquet(str(out / "messages")).collect()
    by_id = {int(r["id"]): r.asDict() for r in rows}
    assert len(by_id) == len(rows), "duplicate ids in the export"
    return by_id


def _history(spark: Any, out: Path) -> list[dict[str, Any]]:
    if not (out / "history").exists():
        return []
    return [r.asDict() for r in spark.read.parquet(str(out / "history")).orderBy("id").collect()]


def _files(out: Path) -> set[str]:
    return {str(p.relative_to(out)) for p in (out / "messages").rglob("*.parquet")} | {
        str(p.relative_to(out)) for p in out.glob("history/**/*.parquet")
    }


def test_fixture_export_decodes_every_row_and_rerun_changes_nothing(
    spark: Any, activemq_engine: Engine, tmp_path: Path
) -> None:
    result = export(spark, dsn_of(activemq_engine), tmp_path)
    assert result.messages == {Q: 12, T: 5}
    assert result.history == {}
    got = _messages(spark, tmp_path)
    assert sorted(got) == list(range(1, 18))
    for row_id, dest, jms_id, kind, prio, exp, corr, typ, props, text, content in FIXTURE_ROWS:
        row = got[row_id]
        assert row["decode_error"] is None
        assert row["destination"] == row["container"] == dest
        assert row["jms_message_id"] == jms_id
        assert row["msgid_prod"] + ":" + str(row["msgid_seq"]) == jms_id
        assert row["kind"] == kind
        assert row["priority"] == prio
        assert row["store_priority"] == 0
        assert row["expiration"] == exp
        assert (row["correlation_id"], row["type"]) == (corr, typ)
        assert row["properties"] == props
        assert row["text"] == text
        payload = None if kind == "text" else bytes.fromhex(content)  # a text is in ``text``
        assert row["body"] == payload
        size = len(text.encode()) if kind == "text" else len(bytes.fromhex(content))
        assert row["body_size"] == size
        if kind == "text":  # the stored content holds the length first
            assert size == len(bytes.fromhex(content)) - 4
        assert row["persistent"] is True
        assert row["redelivery_counter"] == 0
        assert row["original_destination"] is None
        assert str(row["date"]) == "2026-11-22"
        assert bytes(row["msg"])[:5].hex() in {"00000121" + "1c"} or len(row["msg"]) > 200
    marks = load_watermarks(tmp_path)
    assert marks["msgs_max_id"] == 17
    assert marks["history_source"] == "snapshot-diff"
    files = _files(tmp_path)

    again = export(spark, dsn_of(activemq_engine), tmp_path)
    assert again.messages == {} and again.history == {}
    assert _files(tmp_path) == files
    assert len(_messages(spark, tmp_path)) == 17
    assert not list((tmp_path / "_staging").iterdir())


def _copy_fixture(source: Engine, target: Engine) -> None:
    """The fixture's MSGS and ACKS rows into a database migrated by mqstore."""
    msgs = fetch(source, "SELECT * FROM activemq_msgs ORDER BY id")
    acks = fetch(source, "SELECT * FROM activemq_acks")
    execute(
        target,
        "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, msg,"
        " priority, xid) VALUES (:id, :container, :msgid_prod, :msgid_seq, :expiration, :msg,"
        " :priority, :xid)",
        [r._asdict() for r in msgs],
    )
    execute(
        target,
        "INSERT INTO activemq_acks VALUES (:container, :sub_dest, :client_id, :sub_name,"
        " :selector, :last_acked_id, :priority, :xid)",
        [r._asdict() for r in acks],
    )


def _add(engine: Engine, row_id: int, seq: int, container: str = Q) -> None:
    """Store one TextMessage in ``container`` as the broker would."""
    msg = text_message(
        f"new {seq}",
        destination=container,
        producer_id="ID:test-1-2-3:1:1",
        sequence=seq,
        broker_sequence_id=row_id,
        timestamp=1795400000000 + seq,
        properties={"n": seq},
    )
    execute(
        engine,
        "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, msg,"
        " priority) VALUES (:id, :c, :p, :s, 0, :m, 0)",
        {"id": row_id, "c": container, "p": msg.msgid_prod, "s": seq, "m": encode(msg)},
    )


def _remove(engine: Engine, row_id: int, hist_id: int | None = None) -> None:
    """Delete a message and record it as acknowledged, as the store does (optionally late)."""
    override = "OVERRIDING SYSTEM VALUE" if hist_id is not None else ""
    cols = "hist_id, " if hist_id is not None else ""
    vals = f"{hist_id}, " if hist_id is not None else ""
    execute(
        engine,
        f"WITH gone AS (DELETE FROM activemq_msgs WHERE id = {row_id} RETURNING *) "
        f"INSERT INTO mqstore_history ({cols}id, container, msgid_prod, msgid_seq, priority,"
        " expiration, enqueued_at, removed_at, outcome, msg) "
        f"{override} SELECT {vals}id, container, msgid_prod, msgid_seq, priority, expiration,"
        " 1795306859000, 1795400000000, 'acknowledged', msg FROM gone",
    )


def test_incremental_export_adds_new_rows_history_and_late_commits(
    spark: Any, activemq_engine: Engine, engine: Engine, tmp_path: Path
) -> None:
    _copy_fixture(activemq_engine, engine)
    dsn = dsn_of(engine)
    first = export(spark, dsn, tmp_path)
    assert first.message_rows == 17 and first.history_rows == 0

    # hist_id 1 is taken by a transaction that commits only later (see below).
    execute(engine, "SELECT nextval(pg_get_serial_sequence('mqstore_history', 'hist_id'))")
    _add(engine, 18, 1)
    _add(engine, 20, 3)
    _remove(engine, 1)
    _remove(engine, 2)
    second = export(spark, dsn, tmp_path)
    assert second.messages == {Q: 2}
    assert second.history == {Q: 2}
    assert load_watermarks(tmp_path)["history_source"] == "mqstore_history"
    hist = _history(spark, tmp_path)
    assert [(h["id"], h["outcome"]) for h in hist] == [(1, "acknowledged"), (2, "acknowledged")]
    assert all(h["hist_id"] is not None and h["msg"] for h in hist)

    # Commits that become visible below the watermarks: message 19, history row hist_id 1.
    _add(engine, 19, 2)
    _remove(engine, 3, hist_id=1)
    third = export(spark, dsn, tmp_path)
    assert third.messages == {Q: 1}
    assert third.history == {Q: 1}
    got = _messages(spark, tmp_path)
    assert sorted(got) == list(range(1, 21))
    assert got[19]["text"] == "new 2" and got[19]["properties"] == {"n": "2"}
    assert [h["id"] for h in _history(spark, tmp_path)] == [1, 2, 3]

    fourth = export(spark, dsn, tmp_path)
    assert fourth.message_rows == 0 and fourth.history_rows == 0
    assert len(_messages(spark, tmp_path)) == 20
    current = export_mod.current_messages(spark, tmp_path)
    assert sorted(r["id"] for r in current.select("id").collect()) == list(range(4, 21))


def test_plain_activemq_removals_come_from_snapshot_diff(
    spark: Any, activemq_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = dsn_of(activemq_engine)
    export(spark, dsn, tmp_path)
    execute(activemq_engine, "DELETE FROM activemq_msgs WHERE id IN (1, 7)")
    second = export(spark, dsn, tmp_path, now_ms=1795400000000)
    assert second.messages == {}
    assert second.history == {Q: 1, T: 1}
    hist = _history(spark, tmp_path)
    assert [(h["id"], h["destination"], h["outcome"]) for h in hist] == [
        (1, Q, "removed"),
        (7, T, "removed"),
    ]
    assert {h["removed_at"] for h in hist} == {1795400000000}
    assert {h["msgid_seq"] for h in hist} == {1}
    third = export(spark, dsn, tmp_path)
    assert third.history_rows == 0 and third.message_rows == 0

    # A run that dies after moving its files into place has archived nothing.
    execute(activemq_engine, "DELETE FROM activemq_msgs WHERE id = 2")

    def crash(*_args: Any) -> None:
        raise RuntimeError("killed before the watermarks were written")

    with monkeypatch.context() as patch:
        patch.setattr(export_mod, "_write_watermarks", crash)
        with pytest.raises(RuntimeError):
            export(spark, dsn, tmp_path, now_ms=1795400000000)
    assert len(list((tmp_path / "history").rglob("*.parquet"))) == 3  # one of the dead run
    report = audit(spark, dsn, tmp_path / "audit", archive=tmp_path, now_ms=1795400000000)
    assert report["history_per_hour"] == [
        {"hour": "2026-11-23 02:00", "outcome": "removed", "count": 2}
    ]
    assert export_mod.read_dataset(spark, tmp_path / "history").count() == 2


def test_crash_before_watermarks_is_undone_by_the_next_run(
    spark: Any, activemq_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = dsn_of(activemq_engine)

    def crash(*_args: Any) -> None:
        raise RuntimeError("killed before the watermarks were written")

    with monkeypatch.context() as patch:
        patch.setattr(export_mod, "_write_watermarks", crash)
        with pytest.raises(RuntimeError):
            export(spark, dsn, tmp_path)
    assert len(list((tmp_path / "messages").rglob("*.parquet"))) == 2  # moved, not committed
    assert load_watermarks(tmp_path) == {}

    result = export(spark, dsn, tmp_path)
    assert result.messages == {Q: 12, T: 5}
    assert len(_messages(spark, tmp_path)) == 17
    assert len(list((tmp_path / "_snapshots").iterdir())) == 1


def test_table_prefix_is_honoured(
    spark: Any, activemq_engine: Engine, empty_engine: Engine, tmp_path: Path
) -> None:
    build_schema("BRK1_").metadata.create_all(empty_engine)
    for table in ("activemq_msgs", "activemq_acks"):
        rows = [r._asdict() for r in fetch(activemq_engine, f"SELECT * FROM {table}")]
        cols = ", ".join(rows[0])
        execute(
            empty_engine,
            f"INSERT INTO brk1_{table} ({cols}) VALUES ({', '.join(':' + c for c in rows[0])})",
            rows,
        )
    dsn = dsn_of(empty_engine)
    result = export(spark, dsn, tmp_path / "out", "BRK1_")
    assert result.messages == {Q: 12, T: 5}
    assert load_watermarks(tmp_path / "out")["history_source"] == "mqstore_history"
    report = audit(spark, dsn, tmp_path / "audit", "BRK1_", now_ms=1795310000000)
    assert {s["sub_name"]: s["backlog"] for s in report["subscriptions"]} == {"subA": 2, "subB": 5}
    assert report["lock"]["present"] is False


def test_row_committed_between_snapshot_and_read_is_exported_once(
    spark: Any, activemq_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = dsn_of(activemq_engine)
    export(spark, dsn, tmp_path)
    execute(
        activemq_engine,
        "INSERT INTO activemq_msgs SELECT id + 100, container, msgid_prod, msgid_seq + 100,"
        " expiration, msg, priority, xid FROM activemq_msgs WHERE id IN (1, 2, 3)",
    )
    real_index = export_mod.read_msg_index

    def snapshot_before_101_and_102_committed(spark_: Any, src: Any) -> Any:
        return real_index(spark_, src).where("id NOT IN (101, 102)")

    with monkeypatch.context() as patch:
        patch.setattr(export_mod, "read_msg_index", snapshot_before_101_and_102_committed)
        second = export(spark, dsn, tmp_path, now_ms=1795400000000)
    assert second.messages == {Q: 3}  # 101 and 102 were visible to the read that followed
    # 102, exported by that read but in no snapshot, is consumed before the next run.
    execute(activemq_engine, "DELETE FROM activemq_msgs WHERE id = 102")
    third = export(spark, dsn, tmp_path, now_ms=1795400000001)
    assert third.message_rows == 0
    assert third.history == {Q: 1}
    assert [(h["id"], h["msgid_seq"], h["outcome"]) for h in _history(spark, tmp_path)] == [
        (102, 102, "removed")
    ]
    fourth = export(spark, dsn, tmp_path)
    assert fourth.message_rows == 0 and fourth.history_rows == 0
    assert sorted(_messages(spark, tmp_path)) == [*range(1, 18), 101, 102, 103]


def test_a_row_committed_after_an_empty_snapshot_is_exported_once(
    spark: Any, activemq_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    takeover.adopt(activemq_engine)  # with mqstore_history
    dsn = dsn_of(activemq_engine)
    export(spark, dsn, tmp_path)
    execute(activemq_engine, "DELETE FROM activemq_msgs")  # the queue was drained
    execute(
        activemq_engine,
        "INSERT INTO mqstore_history (id, container, msgid_prod, msgid_seq, priority, "
        "expiration, enqueued_at, removed_at, outcome, msg) VALUES (1, 'queue://Q', "
        "'ID:x-1-2-3:1:1', 1, 0, 0, 1795306859000, 1795400000000, 'acknowledged', '\\x00')",
    )
    real_index = export_mod.read_msg_index
    real_query = history_mod.read_query

    def empty_snapshot(spark_: Any, src: Any) -> Any:
        return real_index(spark_, src).where("false")  # taken just before row 18 committed

    def empty_history_max(spark_: Any, src: Any, sql: str) -> Any:
        if sql.startswith("SELECT max(hist_id)"):  # asked just before hist_id 1 committed
            sql = sql.replace("FROM", "FROM (SELECT * FROM", 1) + " WHERE false) t"
        return real_query(spark_, src, sql)

    execute(
        activemq_engine,
        "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, msg, "
        "priority) VALUES (18, :c, 'ID:t-1-2-3:1:1', 18, 0, '\\x00', 0)",
        {"c": Q},
    )
    with monkeypatch.context() as patch:
        patch.setattr(export_mod, "read_msg_index", empty_snapshot)
        patch.setattr(history_mod, "read_query", empty_history_max)
        second = export(spark, dsn, tmp_path)
    assert second.message_rows == 0 and second.history_rows == 0  # left to the next run
    third = export(spark, dsn, tmp_path)
    assert third.message_rows == 1 and third.history_rows == 1
    fourth = export(spark, dsn, tmp_path)
    assert fourth.message_rows == 0 and fourth.history_rows == 0
    assert sorted(_messages(spark, tmp_path)) == [*range(1, 19)]


def test_without_keep_msg_no_raw_bytes_are_archived(
    spark: Any, activemq_engine: Engine, tmp_path: Path
) -> None:
    takeover.adopt(activemq_engine)  # with mqstore_history
    execute(
        activemq_engine,
        "INSERT INTO mqstore_history (id, container, msgid_prod, msgid_seq, priority, "
        "expiration, enqueued_at, removed_at, outcome, msg) VALUES (1, 'queue://Q', "
        "'ID:x-1-2-3:1:1', 1, 0, 0, 1795306859000, 1795400000000, 'acknowledged', "
        "'\\xdeadbeef')",
    )
    payload = b"\x00\x01 stomp.py sends BytesMessages \xff"
    sent = bytes_message(payload, destination=Q, producer_id="ID:b-1-2-3:1:1", sequence=1)
    execute(
        activemq_engine,
        "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, msg,"
        " priority) VALUES (18, :c, :p, 1, 0, :m, 0)",
        {"c": Q, "p": sent.msgid_prod, "m": encode(sent)},
    )
    stored = {r.id: decode(r.msg) for r in fetch(activemq_engine, "SELECT * FROM activemq_msgs")}
    export(spark, dsn_of(activemq_engine), tmp_path, keep_msg=False)
    messages = spark.read.parquet(str(tmp_path / "messages"))
    assert "msg" not in messages.columns
    assert "msg" not in spark.read.parquet(str(tmp_path / "history")).columns
    bodies = {r["id"]: (r["kind"], r["body"], r["body_size"]) for r in messages.collect()}
    assert bodies[18] == ("bytes", payload, len(payload))
    for row_id, kind in ((16, "map"), (17, "stream")):  # the content as stored
        content = stored[row_id].content
        assert content and bodies[row_id] == (kind, content, len(content))
    assert bodies[1] == ("text", None, len("stomp text p0"))


def test_archived_files_are_on_disk_before_the_watermarks_name_them(
    spark: Any, activemq_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a power loss the watermarks must not point past Parquet files the disk lost:
    every file and directory of the run is fsynced before ``_watermarks.json`` replaces
    the last one (``history trim --exported`` deletes the rows it covers)."""
    synced: list[str] = []
    synced_at_commit: list[int] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        if Path(dst).name == "_watermarks.json":
            synced_at_commit.append(len(synced))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    export(spark, dsn_of(activemq_engine), tmp_path)
    [at_commit] = synced_at_commit
    before = set(synced[:at_commit])
    out = Path(os.path.realpath(tmp_path))
    run = [p for d in ("messages", "_snapshots") for p in (out / d).rglob("*")]
    assert any(p.suffix == ".parquet" for p in run)
    missing = [str(p) for p in [*run, out / "messages", out / "_snapshots", out]
               if str(p) not in before]  # fmt: skip
    assert not missing, missing


def test_ids_the_broker_reuses_after_a_restart_are_exported_and_their_removals_recorded(
    spark: Any, activemq_engine: Engine, tmp_path: Path
) -> None:
    """ActiveMQ (and mqstore) resume IDs at max(MAX(ID), MAX(LAST_ACKED_ID)) + 1 on start:
    when the newest queue messages were consumed before a restart, their IDs, at or below
    the export's watermark, are given to new messages."""
    dsn = dsn_of(activemq_engine)
    # MSGID_PROD and MSGID_SEQ may be null in ActiveMQ's table.
    execute(activemq_engine, "UPDATE activemq_msgs SET msgid_prod = NULL, msgid_seq = NULL "
            "WHERE id = 5")  # fmt: skip
    export(spark, dsn, tmp_path)
    # 16 and 17 consumed; the broker restarts (MAX(ID) 15, LAST_ACKED_ID at most 9) and
    # stores two new messages as 16 and 17.
    execute(activemq_engine, "DELETE FROM activemq_msgs WHERE id IN (16, 17)")
    _add(activemq_engine, 16, 1)
    _add(activemq_engine, 17, 2)
    second = export(spark, dsn, tmp_path, now_ms=1795400000000)
    assert second.messages == {Q: 2}
    assert second.history == {Q: 2}
    texts = {
        (r["id"], r["kind"], r["text"])
        for r in spark.read.parquet(str(tmp_path / "messages")).collect()
        if r["id"] in (16, 17)
    }
    assert texts == {(16, "map", None), (17, "stream", None), (16, "text", "new 1"),
                     (17, "text", "new 2")}  # fmt: skip
    removed = [(h["id"], h["msgid_seq"], h["outcome"]) for h in _history(spark, tmp_path)]
    assert removed == [(16, 5, "removed"), (17, 6, "removed")]
    current = export_mod.current_messages(spark, tmp_path).where("id >= 16").collect()
    assert sorted((r["id"], r["text"]) for r in current) == [(16, "new 1"), (17, "new 2")]
    third = export(spark, dsn, tmp_path)
    assert third.message_rows == 0 and third.history_rows == 0


def test_a_jms_timestamp_outside_the_calendar_neither_fails_the_export_nor_the_audit(
    spark: Any, activemq_engine: Engine, tmp_path: Path
) -> None:
    """JMSTimestamp is whatever the producer's client put there: a value no date holds
    must leave its row without a ``date``, not fail every run from then on."""
    odd_clocks = ((18, 2**63 - 1, Q), (19, -(2**63), Q), (20, 253402300800000, Q),
                  (21, -(2**63), T))  # fmt: skip
    for row_id, stamp, container in odd_clocks:
        msg = text_message(
            f"odd clock {row_id}",
            destination=container,
            producer_id="ID:clock-1-2-3:1:1",
            sequence=row_id,
            timestamp=stamp,
        )
        execute(
            activemq_engine,
            "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, msg,"
            " priority) VALUES (:id, :c, :p, :id, 0, :m, 0)",
            {"id": row_id, "c": container, "p": msg.msgid_prod, "m": encode(msg)},
        )
    dsn = dsn_of(activemq_engine)
    result = export(spark, dsn, tmp_path)
    assert result.messages == {Q: 15, T: 6}
    odd = spark.read.parquet(str(tmp_path / "messages")).where("id >= 18")
    assert sorted((r["id"], r["date"], r["text"]) for r in odd.collect()) == [
        (18, None, "odd clock 18"),
        (19, None, "odd clock 19"),
        (20, None, "odd clock 20"),
        (21, None, "odd clock 21"),
    ]
    report = audit(spark, dsn, tmp_path / "audit", now_ms=1795310000000)
    assert {d["destination"]: d["depth"] for d in report["destinations"]} == {Q: 15, T: 6}
    assert {s["sub_name"]: s["backlog"] for s in report["subscriptions"]} == {"subA": 3, "subB": 6}


def test_reads_split_skewed_ids_into_ranges_of_as_many_rows(
    spark: Any, activemq_engine: Engine
) -> None:
    """IDs 1..17, then 200 from a million on: ranges cut at MIN..MAX's middle gave one
    partition 17 rows and the other 200."""
    execute(
        activemq_engine,
        "INSERT INTO activemq_msgs SELECT 1000000 + g, container, msgid_prod, 100 + g,"
        " expiration, msg, priority, xid FROM activemq_msgs, generate_series(1, 200) g"
        " WHERE id = 1",
    )
    src = jdbc_source(dsn_of(activemq_engine))

    def rows_per_partition(df: Any) -> list[int]:
        assert df.count() == df.select("id").distinct().count()  # no row read twice
        return sorted(df.rdd.glom().map(len).collect())

    everything = read_msgs(spark, src, partitions=2)
    assert everything.count() == 217
    assert rows_per_partition(everything) == [108, 109]
    above = read_msgs(spark, src, after=17, partitions=4)
    assert rows_per_partition(above) == [50, 50, 50, 50]
    window = read_msgs(spark, src, after=10, upto=1000100, partitions=3)
    assert window.count() == 107 and max(rows_per_partition(window)) <= 36
