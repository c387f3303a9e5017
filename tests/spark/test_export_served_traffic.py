"""Export and audit of the database a journaled ``mqstore serve`` writes: every message a
client sent is in the archive exactly once, as what became of it (history) or as still
stored, over two exports with traffic between them; the audit's depths are the store's."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest
import stomp

from mqstore.db import libpq_dsn
from spark_etl.decode import decode_msg
from tests.integration.test_cli import mqstore
from tests.spark.conftest import spark_job

A, B, C, D = "queue://e2e.A", "queue://e2e.B", "queue://e2e.C", "queue://e2e.D"
E, T = "queue://e2e.E", "topic://e2e.T"
DLQ = "queue://ActiveMQ.DLQ"
#: Rounds of :class:`_Traffic` at most (a slow export would otherwise make thousands).
MAX_ROUNDS = 100
SERVE_ENV = {
    "MQSTORE_CLEANUP_INTERVAL_S": "0.5",
    "MQSTORE_CHECKPOINT_INTERVAL_MS": "100",
    "MQSTORE_HISTORY": "true",
    "MQSTORE_HISTORY_BODIES": "true",
}


class _Inbox(stomp.ConnectionListener):  # type: ignore[misc]
    """Collects the MESSAGE frames of one connection."""

    def __init__(self) -> None:
        self.frames: queue.Queue[Any] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        self.frames.put(frame)

    def take(self) -> Any:
        return self.frames.get(timeout=30)


def _connect(port: int, client_id: str | None = None) -> tuple[stomp.Connection12, _Inbox]:
    conn = stomp.Connection12([("127.0.0.1", port)], auto_content_length=False, heartbeats=(0, 0))
    inbox = _Inbox()
    conn.set_listener("inbox", inbox)
    headers = {"client-id": client_id} if client_id else {}
    conn.connect(wait=True, headers=headers)
    return conn, inbox


def _dest(container: str) -> str:
    kind, name = container.split("://")
    return f"/{kind}/{name}"


def _send(conn: stomp.Connection12, container: str, bodies: list[str], **headers: str) -> None:
    for body in bodies:
        conn.send(
            _dest(container),
            body,
            headers={"persistent": "true", "receipt": f"r-{body}", **headers},
        )


def _consume(port: int, container: str, settle: dict[str, str], prefetch: int = 1) -> None:
    """Receive ``len(settle)`` messages of a queue (``prefetch`` at a time), ACK or NACK each
    by body."""
    conn, inbox = _connect(port)
    conn.subscribe(
        _dest(container),
        "c",
        ack="client-individual",
        headers={"activemq.prefetchSize": str(prefetch)},
    )
    for _ in settle:
        frame = inbox.take()
        verb = conn.ack if settle[frame.body] == "ack" else conn.nack
        verb(frame.headers["ack"], receipt=f"s-{frame.body}")
    conn.disconnect(receipt="bye")


def _receive(subscriber: tuple[stomp.Connection12, _Inbox], count: int) -> dict[str, str]:
    """The ack ids of the next ``count`` messages of a subscriber, by body."""
    return {
        frame.body: frame.headers["ack"] for frame in (subscriber[1].take() for _ in range(count))
    }


def _ack(
    subscriber: tuple[stomp.Connection12, _Inbox], ack_ids: dict[str, str], *bodies: str
) -> None:
    for body in bodies:
        subscriber[0].ack(ack_ids[body], receipt=f"t-{body}")


class _Traffic(threading.Thread):
    """Rounds of messages while an export runs: three to queue C (two ACKed, one NACKed),
    two to queue D (left stored); ``rounds`` counts the rounds done."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.stop, self.rounds = port, threading.Event(), 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            producer, _ = _connect(self.port)
            while True:  # one round at least, however soon the export ends
                n = self.rounds
                _send(producer, C, [f"c{n}-1", f"c{n}-2", f"c{n}-3"])
                _send(producer, D, [f"d{n}-1", f"d{n}-2"])
                plan = {f"c{n}-1": "ack", f"c{n}-2": "ack", f"c{n}-3": "nack"}
                _consume(self.port, C, plan, prefetch=3)
                self.rounds += 1
                if self.stop.is_set() or self.rounds == MAX_ROUNDS:
                    break
            producer.disconnect(receipt="bye")
        except BaseException as exc:
            self.error = exc


def _wait_for(dsn: str, sql: str, expected: int) -> None:
    """Until the broker's checkpoints and cleanups brought ``sql`` (a count) to ``expected``."""
    deadline = time.monotonic() + 30
    with psycopg.connect(libpq_dsn(dsn), autocommit=True) as conn:
        while (got := conn.execute(sql).fetchone()) != (expected,):
            assert time.monotonic() < deadline, f"{sql}: {got}, expected {expected}"
            time.sleep(0.1)


def _rows(root: Path, columns: list[str]) -> list[dict[str, Any]]:
    files = sorted(root.rglob("*.parquet")) if root.exists() else []
    return [row for f in files for row in pq.read_table(f, columns=columns).to_pylist()]


def _history(out: Path) -> list[tuple[str, str, str]]:
    """(container, outcome, body) of every exported history row."""
    rows = _rows(out / "history", ["hist_id", "container", "outcome", "msg"])
    assert len({r["hist_id"] for r in rows}) == len(rows), "a history row exported twice"
    return [(r["container"], r["outcome"], decode_msg(r["msg"])["text"]) for r in rows]


def _current(out: Path) -> list[tuple[str, str]]:
    """(container, body) of the exported messages the last run's snapshot holds."""
    key = ("id", "msgid_prod", "msgid_seq")
    rows = _rows(out / "messages", [*key, "container", "text"])
    keys = [tuple(r[k] for k in key) for r in rows]
    assert len(set(keys)) == len(keys), "a message exported twice"
    marks = json.loads((out / "_watermarks.json").read_text())
    snap = pq.read_table(out / "_snapshots" / marks["snapshot"]).to_pylist()
    stored = {tuple(r[k] for k in key) for r in snap}
    return [(r["container"], r["text"]) for r, k in zip(rows, keys, strict=True) if k in stored]


def _export(dsn: str, out: Path) -> None:
    run = spark_job("export", "--dsn", dsn, "--out", str(out), "--master", "local[1]")
    assert run.returncode == 0, run.stderr


def _serve(dsn: str, tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    """A journaled ``mqstore serve`` on ``dsn`` (``tmp_path/data``) and its STOMP port."""
    log = (tmp_path / "serve.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqstore", "serve", "--dsn", dsn, "--journal", "--lock", "none",
         "--data-dir", str(tmp_path / "data"), "--stomp", "127.0.0.1:0",
         "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=log, text=True, env={**os.environ, **SERVE_ENV},
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "serving STOMP" in line, (tmp_path / "serve.log").read_text()
    return proc, int(line.rsplit(":", 1)[1])


def _stop(proc: subprocess.Popen[str], tmp_path: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, (tmp_path / "serve.log").read_text()


def _subscribers(port: int) -> list[tuple[stomp.Connection12, _Inbox]]:
    """The two durable subscribers of topic T, connected."""
    subscribers = [_connect(port, f"client-{n}") for n in (0, 1)]
    for n, (conn, _) in enumerate(subscribers):
        conn.subscribe(
            _dest(T), f"d{n}", ack="client-individual",
            headers={"activemq.subscriptionName": f"sub-{n}", "receipt": f"sub-{n}"},
        )  # fmt: skip
    return subscribers


def _disconnect(*conns: stomp.Connection12) -> None:
    for conn in conns:
        conn.disconnect(receipt="bye")


@pytest.mark.slow
@pytest.mark.timeout(900)  # a served broker's traffic, then several Spark exports
def test_every_message_a_served_broker_handled_is_exported_once_with_its_outcome(
    dsn: str, tmp_path: Path
) -> None:
    out = tmp_path / "archive"
    topic_rows = f"SELECT count(*) FROM activemq_msgs WHERE container = '{T}'"
    proc, port = _serve(dsn, tmp_path)
    try:
        producer, _ = _connect(port)
        subscribers = _subscribers(port)
        _wait_for(dsn, f"SELECT count(*) FROM activemq_acks WHERE container = '{T}'", 2)

        # Before the first export: acks, a NACK, an expiry, a topic every subscriber acks.
        _send(producer, A, ["a1", "a2", "a3", "a4"])
        _consume(port, A, {"a1": "ack", "a2": "ack", "a3": "ack", "a4": "nack"})
        _send(producer, A, ["a5", "a6"])
        _send(producer, E, ["e1"], expires=str(int(time.time() * 1000) + 300))
        _send(producer, T, ["t1", "t2", "t3"])
        _wait_for(dsn, topic_rows, 3)  # checkpointed: the cleanup deletes them once acked
        first, second = (_receive(sub, 3) for sub in subscribers)
        _ack(subscribers[0], first, "t1", "t2", "t3")
        _ack(subscribers[1], second, "t1", "t2")  # t3 stays stored for this one
        _wait_for(dsn, "SELECT count(*) FROM mqstore_history", 7)
        _wait_for(dsn, "SELECT count(*) FROM activemq_msgs", 5)  # a5, a6, t3; DLQ a4, e1
        traffic = _Traffic(port)
        traffic.start()
        _export(dsn, out)  # while messages come and go
        traffic.stop.set()
        traffic.join(60)
        assert traffic.error is None, traffic.error
        rounds = range(traffic.rounds)

        # The newest messages the first export archived as stored are consumed, and the
        # broker restarts: it gives their IDs to new messages.
        _consume(port, D, {f"d{n}-{i}": "ack" for n in rounds for i in (1, 2)}, prefetch=100)
        in_dlq = ["a4", "e1", *(f"c{n}-3" for n in rounds)]
        _consume(port, DLQ, dict.fromkeys(in_dlq, "ack"), prefetch=100)
        _disconnect(producer, *(conn for conn, _ in subscribers))
        _stop(proc, tmp_path)

        proc, port = _serve(dsn, tmp_path)
        producer, _ = _connect(port)
        subscribers = _subscribers(port)
        _ack(subscribers[1], _receive(subscribers[1], 1), "t3")
        _consume(port, A, {"a5": "ack", "a6": "nack"})
        _send(producer, A, ["a7"])
        _send(producer, B, ["b1", "b2"])
        _send(producer, T, ["t4", "t5"])
        _wait_for(dsn, topic_rows, 2)
        for sub in subscribers:
            _ack(sub, _receive(sub, 2), "t4", "t5")
        _send(producer, T, ["t6"])  # dead-lettered by one subscriber, acknowledged by the other
        subscribers[0][0].nack(subscribers[0][1].take().headers["ack"], receipt="n-t6")
        _ack(subscribers[1], _receive(subscribers[1], 1), "t6")
        _wait_for(dsn, topic_rows, 0)
        _disconnect(producer, *(conn for conn, _ in subscribers))
        _stop(proc, tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

    _export(dsn, out)
    audited = spark_job("audit", "--dsn", dsn, "--out", str(tmp_path / "audit"),
                        "--archive", str(out), "--master", "local[1]")  # fmt: skip
    assert audited.returncode == 0, audited.stderr

    acked, dead, expired = "acknowledged", "dead-lettered", "expired"
    history = Counter(
        [(A, acked, b) for b in ("a1", "a2", "a3", "a5")]
        + [(A, dead, "a4"), (A, dead, "a6"), (E, expired, "e1")]
        + [(T, acked, f"t{n}") for n in range(1, 7)]
        + [(C, acked, f"c{n}-{i}") for n in rounds for i in (1, 2)]
        + [(C, dead, f"c{n}-3") for n in rounds]
        + [(D, acked, f"d{n}-{i}") for n in rounds for i in (1, 2)]
        + [(DLQ, acked, body) for body in in_dlq]
    )
    assert Counter(_history(out)) == history
    assert Counter(_current(out)) == Counter(
        [(A, "a7"), (B, "b1"), (B, "b2"), (DLQ, "a6"), (DLQ, "t6")]
    )

    expected_depths = {A: 1, B: 2, DLQ: 2}
    report = json.loads((tmp_path / "audit" / "audit.json").read_text())
    depths = {d["destination"]: d["depth"] for d in report["destinations"]}
    stats = mqstore("stats", "--dsn", dsn, "--json")
    assert stats.returncode == 0, stats.stderr
    stored = {k: v for k, v in json.loads(stats.stdout)["destinations"].items() if v}
    assert depths == stored == expected_depths
    per_outcome: Counter[str] = Counter()
    for row in report["history_per_hour"]:
        per_outcome[row["outcome"]] += row["count"]
    assert per_outcome == Counter(outcome for _, outcome, _ in history.elements())
