"""mqstore and a real ActiveMQ 5.17 broker are interchangeable on one database."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from tests.interop.activemq_broker import ActiveMQBroker
from tests.interop.conftest import MqstoreServer
from tests.interop.stomp_client import Received, connect, receive, send

QUEUE, TOPIC = "/queue/INTEROP.Q", "/topic/INTEROP.T"
AmqFactory = Callable[..., ActiveMQBroker]
ServeFactory = Callable[..., MqstoreServer]

#: The queue backlog: (body, content-length?, headers).
BACKLOG: list[tuple[bytes, bool, dict[str, str]]] = [
    (b"plain text one", False, {"priority": "0", "tag": "Q1"}),
    (b"high priority", False, {"priority": "9", "tag": "Q2", "colour": "red"}),
    ("unicode h\u00e9llo \u2713".encode(), False, {"priority": "4", "tag": "Q3"}),
    (b"\x00\x01binary\xff\x00", True, {"priority": "4", "tag": "Q4", "kind": "bytes"}),
    (
        b"with headers",
        False,
        {
            "priority": "4",
            "tag": "Q5",
            "correlation-id": "corr-1",
            "type": "fixture.type",
            "expires": "4102444800000",
        },
    ),
]


def mqstore_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mqstore", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def write_backlog(port: int) -> None:
    """Durable subscribers subA/subB, the queue backlog, T1..T4; subA consumes T1, T2."""
    for client, sub in (("client-a", "subA"), ("client-b", "subB")):
        receive(port, TOPIC, 0, client_id=client, subscription=sub, timeout=0.5, settle=0.1)
    conn, _ = connect(port)
    for i, (body, binary, headers) in enumerate(BACKLOG):
        extra = {"content-length": str(len(body))} if binary else {}
        send(conn, QUEUE, body, receipt=f"q{i}", **headers, **extra)
    for i in range(1, 5):
        send(conn, TOPIC, f"topic msg {i}", receipt=f"t{i}", tag=f"T{i}")
    conn.disconnect(receipt="done")
    got = receive(port, TOPIC, 4, client_id="client-a", subscription="subA", ack_first=2)
    assert [m.body for m in got] == [f"topic msg {i}".encode() for i in range(1, 5)]


def check_backlog(port: int) -> None:
    """The other broker delivers exactly the backlog: order, bodies, headers, properties."""
    got = receive(port, QUEUE, len(BACKLOG))
    assert [m.body for m in got] == [b for b, _, _ in BACKLOG]
    for message, (body, binary, headers) in zip(got, BACKLOG, strict=True):
        h = message.headers
        assert h["tag"] == headers["tag"]
        assert h["priority"] == headers["priority"]
        assert h["persistent"] == "true"
        assert h["message-id"].startswith("ID:")
        if binary:
            assert h["content-length"] == str(len(body))
    by_tag = {m.headers["tag"]: m.headers for m in got}
    assert by_tag["Q2"]["colour"] == "red"
    assert by_tag["Q5"]["correlation-id"] == "corr-1"
    assert by_tag["Q5"]["type"] == "fixture.type"
    assert by_tag["Q5"]["expires"] == "4102444800000"
    a = receive(port, TOPIC, 2, client_id="client-a", subscription="subA")
    assert [m.headers["tag"] for m in a] == ["T3", "T4"]
    b = receive(port, TOPIC, 4, client_id="client-b", subscription="subB")
    assert [m.headers["tag"] for m in b] == ["T1", "T2", "T3", "T4"]
    assert receive(port, QUEUE, 0, timeout=0.3) == []


def _message_ids(messages: list[Received]) -> list[str]:
    return [m.headers["message-id"] for m in messages]


def test_activemq_runs_on_a_database_mqstore_migrated(activemq: AmqFactory, dsn: str) -> None:
    amq = activemq(dsn=dsn, create_tables=False)
    receive(amq.cfg.stomp_port, TOPIC, 0, client_id="c1", subscription="s1", timeout=0.3)
    conn, _ = connect(amq.cfg.stomp_port)
    for i in range(3):
        send(conn, QUEUE, f"m{i}", receipt=f"r{i}")
    conn.begin("tx1")
    conn.send(QUEUE, "in tx", headers={"persistent": "true", "transaction": "tx1"})
    conn.commit("tx1")
    send(conn, TOPIC, "to durable", receipt="rt")
    conn.disconnect(receipt="bye")
    assert [m.body for m in receive(amq.cfg.stomp_port, QUEUE, 4)] == [
        b"m0",
        b"m1",
        b"m2",
        b"in tx",
    ]
    assert [
        m.body for m in receive(amq.cfg.stomp_port, TOPIC, 1, client_id="c1", subscription="s1")
    ] == [b"to durable"]
    amq.stop()
    log = amq.log_text()
    problems = [
        line
        for line in log.splitlines()
        if " ERROR " in line or ("WARN" in line and "JDBC" in line)
    ]
    assert problems == [], "\n".join(problems)
    assert mqstore_cli("db", "check", "--dsn", dsn).returncode == 0


def test_activemq_backlog_is_served_by_mqstore(
    activemq: AmqFactory, mqstore_server: ServeFactory, empty_dsn: str
) -> None:
    amq = activemq(dsn=empty_dsn, create_tables=True)
    write_backlog(amq.cfg.stomp_port)
    amq.stop()
    adopted = mqstore_cli("db", "adopt", "--dsn", empty_dsn)
    assert adopted.returncode == 0, adopted.stderr
    server = mqstore_server(empty_dsn, name="mqs", journal=True, lock="lease")
    check_backlog(server.port)


def test_mqstore_backlog_is_served_by_activemq(
    activemq: AmqFactory, mqstore_server: ServeFactory, dsn: str
) -> None:
    server = mqstore_server(dsn, name="mqs", journal=True, lock="lease")
    write_backlog(server.port)
    server.stop()
    assert server.process is not None and server.process.returncode == 0, server.log_text()
    amq = activemq(dsn=dsn, create_tables=False)
    check_backlog(amq.cfg.stomp_port)


def _masters(*brokers: ActiveMQBroker | MqstoreServer) -> list[bool]:
    return [b.serving() for b in brokers]


def _watch(
    brokers: tuple[ActiveMQBroker | MqstoreServer, ...], until: Callable[[], bool], timeout: float
) -> float:
    """Poll every 100 ms that at most one broker serves; return seconds until ``until()``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        serving = _masters(*brokers)
        assert sum(serving) <= 1, f"two masters at once: {serving}"
        if until():
            return time.monotonic() - start
        time.sleep(0.1)
    raise AssertionError(f"no takeover within {timeout}s")


@pytest.mark.parametrize("first", ["activemq", "mqstore"])
def test_shared_lease_one_master_and_failover(
    activemq: AmqFactory, mqstore_server: ServeFactory, dsn: str, first: str
) -> None:
    lease, renew = 3000, 1000
    if first == "activemq":
        master: ActiveMQBroker | MqstoreServer = activemq(
            dsn=dsn, create_tables=False, lease_ms=lease, renew_ms=renew
        )
        standby: ActiveMQBroker | MqstoreServer = mqstore_server(
            dsn, name="mqs", journal=False, lock="lease", lease_ms=lease, renew_ms=renew, wait=False
        )
    else:
        master = mqstore_server(
            dsn, name="mqs", journal=False, lock="lease", lease_ms=lease, renew_ms=renew
        )
        standby = activemq(dsn=dsn, create_tables=False, lease_ms=lease, renew_ms=renew, wait=False)
    pair = (master, standby)
    # Both up: only the first one serves, for a while.
    with pytest.raises(AssertionError, match="no takeover"):
        _watch(pair, standby.serving, timeout=4)
    assert master.serving()
    master.kill()
    # The standby takes over, never beside a master; how fast is measured by
    # benchmarks/activemq/compare.py (kill -9 failover), not asserted here.
    _watch(pair, standby.serving, timeout=2 * lease / 1000 + 10)


def test_an_activemq_standby_waits_for_a_killed_journaled_mqstore(
    activemq: AmqFactory,
    mqstore_server: ServeFactory,
    dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the journaled mqstore receipted is in its journal alone (no checkpoint ran):
    killed, its lease is kept for that journal, and ActiveMQ's lease locker waits until
    mqstore, started again on its journal, applied it and stopped; then it serves it all."""
    monkeypatch.setenv("MQSTORE_CHECKPOINT_INTERVAL_MS", "600000")
    lease, renew = 3000, 1000
    master = mqstore_server(
        dsn, name="mqs", journal=True, lock="lease", lease_ms=lease, renew_ms=renew
    )
    standby = activemq(dsn=dsn, create_tables=False, lease_ms=lease, renew_ms=renew, wait=False)
    conn, _ = connect(master.port)
    bodies = [f"journaled {i}".encode() for i in range(20)]
    for i, body in enumerate(bodies):
        send(conn, QUEUE, body, receipt=f"j{i}")
    conn.disconnect(receipt="done")
    master.kill()
    pair = (master, standby)
    with pytest.raises(AssertionError, match="no takeover"):
        _watch(pair, standby.serving, timeout=3 * lease / 1000 + 2)
    master.start()
    master.stop()
    assert master.process is not None and master.process.returncode == 0, master.log_text()
    _watch(pair, standby.serving, timeout=2 * lease / 1000 + 10)
    assert [m.body for m in receive(standby.cfg.stomp_port, QUEUE, len(bodies))] == bodies
