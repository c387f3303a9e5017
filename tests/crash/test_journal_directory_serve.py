"""``mqstore serve`` on a journal directory that is not its own: it exits with one line
saying what to do, and writes nothing of the journal into the wrong database."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from journal.format import HEADER_SIZE
from mqstore.db import create_engine
from tests.broker.harness import connect, drain
from tests.conftest import Databases, count_rows
from tests.interop.conftest import MqstoreServer

QUEUE = "/queue/journal.dir"


@pytest.fixture
def other_dsn(databases: Databases) -> str:
    return databases.dsn_for(databases.create(template=databases.migrated_template()))


def _send(port: int, count: int) -> None:
    conn, client = connect(port)
    for i in range(count):
        conn.send(QUEUE, f"m{i}", headers={"persistent": "true"}, receipt=f"r{i}")
        assert client.wait(lambda r=f"r{i}": r in client.receipts, 10)
    conn.disconnect()


def _refused(server: MqstoreServer) -> str:
    """Start ``server``, expecting it to exit; its output."""
    server.start(wait=False)
    assert server.process is not None
    try:
        code = server.process.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()
        raise AssertionError(f"serve did not refuse:\n{server.log_text()}") from None
    assert code == 2, server.log_text()
    text = server.log_text()
    assert "Traceback" not in text, text
    return text


def _rows(dsn: str) -> int:
    engine: Engine = create_engine(dsn)
    try:
        return count_rows(engine, "activemq_msgs")
    finally:
        engine.dispose()


def test_serve_refuses_a_journal_of_another_database(
    dsn: str, other_dsn: str, tmp_path: Path
) -> None:
    env = {"MQSTORE_CHECKPOINT_INTERVAL_MS": "600000"}  # keep the messages in the journal
    server = MqstoreServer(dsn, tmp_path / "data", name="a", journal=True, lock="none")
    server.env.update(env)
    server.start()
    _send(server.port, 5)
    server.kill()
    other = MqstoreServer(other_dsn, tmp_path / "data", name="b", journal=True, lock="none")
    other.env.update(env)
    assert "belongs to database" in _refused(other)
    assert _rows(other_dsn) == 0
    server = MqstoreServer(dsn, tmp_path / "data", name="a", journal=True, lock="none").start()
    try:
        assert sorted(drain(server.port, QUEUE)) == [f"m{i}" for i in range(5)]
    finally:
        server.stop()


def test_a_second_serve_on_a_journal_in_use_exits_with_one_line(
    dsn: str, other_dsn: str, tmp_path: Path
) -> None:
    server = MqstoreServer(dsn, tmp_path / "data", name="a", journal=True, lock="none").start()
    try:
        for n, target in enumerate((dsn, other_dsn)):
            second = MqstoreServer(target, tmp_path / "data", name="b", journal=True, lock="none")
            second.base = tmp_path / f"second-{n}"  # its own log; the journal is the first's
            second.base.mkdir()
            text = _refused(second)
            assert "is locked by another process" in text and "stop it first" in text
        _send(server.port, 1)  # the first goes on
    finally:
        server.stop()


def test_receipted_messages_survive_the_journal_directory_being_deleted(
    dsn: str, tmp_path: Path
) -> None:
    base = tmp_path / "data"
    server = MqstoreServer(dsn, base, name="a", journal=True, lock="none")
    server.env.update(
        {"MQSTORE_CHECKPOINT_INTERVAL_MS": "600000", "MQSTORE_JOURNAL_SEGMENT_MB": "1"}
    )
    server.start()
    receipted: list[str] = []
    try:
        conn, client = connect(server.port)
        for i in range(400):  # 1 MiB segments: the journal rotates within these
            if i == 5:  # five only in the journal, then it is gone
                shutil.rmtree(base / "journal")
            body = f"m{i}-" + "x" * 10_000
            conn.send(QUEUE, body, headers={"persistent": "true"}, receipt=f"r{i}")
            assert client.wait(lambda r=f"r{i}": r in client.receipts or client.errors, 10)
            if client.errors:
                break
            receipted.append(body)
        assert len(receipted) >= 5
        assert client.errors, "the broker went on acknowledging into a deleted journal"
        said = " ".join(f"{e.headers} {e.body}" for e in client.errors)
        assert "journal took no write" in said and str(base) not in said, said
        assert server.process is not None
        try:  # a broker that can write nothing stops, for a supervisor to restart it
            code = server.process.wait(30)
        except subprocess.TimeoutExpired:
            raise AssertionError("serve kept running on a failed journal") from None
    finally:
        server.stop()
    text = server.log_text()
    assert code == 2, text
    assert "its journal in" in text and "failed" in text and "restart it" in text, text
    assert "Traceback" not in text, text
    server = MqstoreServer(dsn, base, name="a", journal=True, lock="none").start()
    try:
        delivered = drain(server.port, QUEUE)
    finally:
        server.stop()
    assert delivered == receipted


def test_a_bad_record_is_refused_then_repaired_without_losing_the_later_ones(
    dsn: str, tmp_path: Path
) -> None:
    base = tmp_path / "data"
    server = MqstoreServer(dsn, base, name="a", journal=True, lock="none")
    server.env["MQSTORE_CHECKPOINT_INTERVAL_MS"] = "600000"  # all of them only in the journal
    server.start()
    _send(server.port, 10)
    server.kill()
    [segment] = (base / "journal").glob("*.wal")
    data = bytearray(segment.read_bytes())
    data[HEADER_SIZE + 12] ^= 0x40  # inside the first message's record
    segment.write_bytes(bytes(data))
    refused = MqstoreServer(dsn, base, name="a", journal=True, lock="none")
    text = _refused(refused)
    assert f"{segment} is corrupt at offset {HEADER_SIZE}" in text
    assert f"mqstore journal repair {base / 'journal'}" in text
    cli = [sys.executable, "-m", "mqstore", "journal", "repair", str(base / "journal")]
    dry = subprocess.run([*cli, "--dry-run"], capture_output=True, text=True, check=True)
    assert "0 readable records" in dry.stdout, dry.stdout
    subprocess.run(cli, capture_output=True, text=True, check=True)
    server = MqstoreServer(dsn, base, name="a", journal=True, lock="none").start()
    try:
        assert sorted(drain(server.port, QUEUE)) == sorted(f"m{i}" for i in range(1, 10))
    finally:
        server.stop()


def test_a_killed_brokers_journal_missing_at_the_next_start_is_refused(
    dsn: str, tmp_path: Path
) -> None:
    """The journal on storage that did not survive (a container redeployed, say): the next
    start is refused instead of losing the receipted messages; with it back, all arrive."""
    base = tmp_path / "data"
    server = MqstoreServer(dsn, base, name="a", journal=True, lock="none")
    server.env["MQSTORE_CHECKPOINT_INTERVAL_MS"] = "600000"  # all of them only in the journal
    server.start()
    _send(server.port, 5)
    server.kill()
    shutil.move(base / "journal", tmp_path / "kept")
    text = _refused(MqstoreServer(dsn, base, name="a", journal=True, lock="none"))
    assert "did not stop cleanly" in text and "mqstore journal forget" in text, text
    assert _rows(dsn) == 0
    shutil.rmtree(base / "journal")
    shutil.move(tmp_path / "kept", base / "journal")
    server = MqstoreServer(dsn, base, name="a", journal=True, lock="none").start()
    try:
        assert sorted(drain(server.port, QUEUE)) == [f"m{i}" for i in range(5)]
    finally:
        server.stop()
