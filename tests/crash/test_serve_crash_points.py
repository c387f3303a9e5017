"""SIGKILL of ``mqstore serve`` at the journal's risky points, driven by real STOMP clients.

Each case runs rounds of producers and a consumer against a journaled ``mqstore serve``,
SIGKILLs it at a random moment, and starts it again on the same data directory. The
settings put the kills where the journal does its riskiest work: checkpoints every few
milliseconds (a kill between the database COMMIT and the release of the segments behind
it), 1 MiB segments filled by 4 KiB bodies (rotation every couple of hundred messages), or
a window at its ``max_pending_bytes`` limit (producers held back, checkpoints forced by
size); history is on (elided messages get history rows in the checkpoint transaction).
Two more cases crash the database under the checkpoints and start the killed broker once
before it is back, or kill the broker within the replay of its next starts. After the last
kill a fresh run must deliver every message a RECEIPT or a COMMIT's receipt acknowledged
exactly once, and none whose consumer ACK (or ACKs in a committed transaction) was
receipted.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.broker.harness import Collector, connect, drain
from tests.crash.conftest import PrivatePostgres
from tests.interop.conftest import MqstoreServer

QUEUE = "/queue/crash.points"
TOPIC = "/topic/crash.points"
BODY_PAD = "x" * 4096  # 1 MiB segments rotate every couple of hundred messages
P = {"persistent": "true"}
ROUNDS = 4

#: Checkpoints all the time: kills land inside them and between their commit and release.
CHECKPOINTING = {"MQSTORE_CHECKPOINT_INTERVAL_MS": "5", "MQSTORE_JOURNAL_SEGMENT_MB": "1"}
#: No timed checkpoints: the window fills to max_pending_bytes and producers wait for room.
WINDOW_FULL = {
    "MQSTORE_CHECKPOINT_INTERVAL_MS": "600000",
    "MQSTORE_CHECKPOINT_MAX_PENDING_MB": "1",
    "MQSTORE_JOURNAL_SEGMENT_MB": "1",
}

#: Nothing checkpointed while it runs (a window of up to 16 MiB): all left to replay.
LARGE_WINDOW = {**WINDOW_FULL, "MQSTORE_CHECKPOINT_MAX_PENDING_MB": "16"}

#: What ``mqstore serve`` logs once its database store started, before the replay.
STORE_STARTED = "mqstore.store.postgres: store started"

Crash = Callable[[MqstoreServer, random.Random], None]


def _server(dsn: str, data: Path, env: dict[str, str], *, wait: bool = True) -> MqstoreServer:
    server = MqstoreServer(dsn, data, name="crash-points", journal=True, lock="none")
    server.env.update(env, MQSTORE_HISTORY="true")
    return server.start(wait=wait)


class _Client(Collector):
    """A collector whose waits end as soon as the connection drops (the server killed)."""

    def on_disconnected(self) -> None:
        super().on_disconnected()
        with self.cond:
            self.cond.notify_all()


def _connect(port: int, client_id: str | None = None) -> tuple[Any, Collector]:
    return connect(port, client_id=client_id, listener=_Client())


def _beyond(client: Collector, count: int) -> Callable[[], bool]:
    """Whether ``client`` has received more than ``count`` messages."""
    return lambda: len(client.messages) > count


def _wait_receipt(client: Collector, rid: str) -> bool:
    """Whether the receipt ``rid`` came (False at once once the server is gone)."""
    client.wait(lambda: rid in client.receipts or client.disconnected.is_set(), 10)
    return rid in client.receipts


def _produce(port: int, dest: str, tag: str, receipted: list[str], stop: threading.Event) -> None:
    """Send until stopped: transactions of 1-5 SENDs committed with a receipt, and plain
    persistent SENDs with one; a body counts once its receipt came."""
    rng = random.Random(tag)
    try:
        conn, client = _connect(port)
        for n in range(100_000):
            if stop.is_set():
                return
            if rng.random() < 0.6:
                tx = f"{tag}-tx{n}"
                bodies = [f"{tag}-t{n}-{i}" for i in range(rng.randrange(1, 6))]
                conn.begin(tx)
                for body in bodies:
                    conn.send(dest, body + BODY_PAD, headers=P, transaction=tx)
                conn.commit(tx, receipt=tx)
                if not _wait_receipt(client, tx):
                    return
                receipted.extend(bodies)
            else:
                body = f"{tag}-s{n}"
                conn.send(dest, body + BODY_PAD, headers=P, receipt=body)
                if not _wait_receipt(client, body):
                    return
                receipted.append(body)
    except Exception:  # the server was killed under us
        return


@dataclass
class Acks:
    """What the consumers acknowledged: sent (``tried``), and receipted (``acked``)."""

    tried: list[str] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    #: Messages a later round's consumer received although their ACK was receipted.
    back: list[str] = field(default_factory=list)


def _name(frame: Any) -> str:
    return str(frame.body).removesuffix(BODY_PAD)


def _consume(
    port: int,
    dest: str,
    tag: str,
    acks: Acks,
    stop: threading.Event,
    quiet: threading.Event,
    *,
    durable: bool,
) -> None:
    """Acknowledge what arrives, in delivery order, until ``quiet``: a run of messages by
    ACKs in one transaction committed with a receipt, or by one receipted ACK each. A body
    is ``tried`` once its ACK (or its transaction's COMMIT) is sent, ``acked`` once the
    receipt came; after ``quiet`` what arrives stays unacknowledged."""
    rng = random.Random(tag)
    done_before = set(acks.acked)
    client: Collector | None = None
    try:
        conn, client = _connect(port, "crash-points" if durable else None)
        headers = {"activemq.prefetchSize": "20"}
        if durable:
            headers["activemq.subscriptionName"] = "points"
        conn.subscribe(dest, id="1", ack="client-individual", headers=headers)
        handled = 0
        n = 0
        while not stop.is_set() and not quiet.is_set():
            if not client.wait(_beyond(client, handled), 0.2):
                continue
            frames = client.messages[handled : handled + rng.randrange(1, 8)]
            handled += len(frames)
            n += 1
            if rng.random() < 0.5:
                tx = f"{tag}-ack{n}"
                conn.begin(tx)
                for frame in frames:
                    conn.ack(frame.headers["ack"], transaction=tx)
                acks.tried.extend(_name(f) for f in frames)
                conn.commit(tx, receipt=tx)
                if not _wait_receipt(client, tx):
                    return
                acks.acked.extend(_name(f) for f in frames)
            else:
                for frame in frames:
                    rid = f"{tag}-ack-{_name(frame)}"
                    acks.tried.append(_name(frame))
                    conn.ack(frame.headers["ack"], receipt=rid)
                    if not _wait_receipt(client, rid):
                        return
                    acks.acked.append(_name(frame))
        stop.wait(30)  # quiet: receive on, until the kill
    except Exception:
        return
    finally:
        if client is not None:
            acks.back += [b for m in list(client.messages) if (b := _name(m)) in done_before]


def _drain_durable(port: int) -> list[str]:
    """Bodies the durable subscription gets (auto ack) until nothing arrives for 2 s."""
    conn, client = connect(port, client_id="crash-points")
    conn.subscribe(TOPIC, id="1", ack="auto", headers={"activemq.subscriptionName": "points"})
    seen = -1
    while seen != len(client.messages):
        seen = len(client.messages)
        client.wait(_beyond(client, seen), 2.0)
    conn.disconnect()
    return [_name(m) for m in client.messages]


def _rounds(
    dsn: str,
    data: Path,
    env: dict[str, str],
    dest: str,
    *,
    rounds: int = ROUNDS,
    crash: Crash = lambda server, _rng: server.kill(),
) -> tuple[list[str], Acks]:
    """Kill ``mqstore serve`` under two producers and a consumer ``rounds`` times (with
    ``crash``, which must leave it dead)."""
    durable = dest == TOPIC
    receipted: list[str] = []
    acks = Acks()
    rng = random.Random(f"{sorted(env.items())}{dest}")
    for round_no in range(rounds):
        server = _server(dsn, data, env)
        stop, quiet = threading.Event(), threading.Event()
        workers = [
            threading.Thread(
                target=_produce, args=(server.port, dest, f"r{round_no}p{i}", receipted, stop)
            )
            for i in range(2)
        ]
        workers.append(
            threading.Thread(
                target=_consume,
                args=(server.port, dest, f"r{round_no}c", acks, stop, quiet),
                kwargs={"durable": durable},
            )
        )
        if durable and round_no == 0:  # the subscription exists before anything is sent
            conn, client = _connect(server.port, "crash-points")
            conn.subscribe(
                dest,
                id="1",
                ack="client-individual",
                headers={"activemq.subscriptionName": "points"},
                receipt="sub",
            )
            assert _wait_receipt(client, "sub")
            conn.disconnect()
        for w in workers:
            w.start()
        time.sleep(rng.uniform(1.0, 2.0))
        if round_no == rounds - 1 or rng.random() < 0.5:
            quiet.set()  # the kill finds receipted messages nobody acknowledged
        time.sleep(rng.uniform(0.0, 1.0))
        crash(server, rng)
        stop.set()
        for w in workers:
            w.join(15)
        assert receipted, f"round {round_no}: nothing was receipted before the kill"
    return receipted, acks


def _outage(pg: PrivatePostgres, data: Path, env: dict[str, str]) -> Crash:
    """Crash the database under the checkpoints (one may be committing), let the clients
    go on against the journal a while, SIGKILL the broker, and start it again while the
    database is still down: it must give up without touching the journal. Then the
    database comes back."""

    def crash(server: MqstoreServer, rng: random.Random) -> None:
        pg.server.stop("immediate")
        time.sleep(rng.uniform(0.2, 1.0))  # writes go on into the journal alone
        server.kill()
        again = _server(pg.dsn, data, env, wait=False)
        assert again.process is not None
        try:
            assert again.process.wait(60) != 0, "a broker started without its database"
        finally:
            again.kill()
        pg.server.start()

    return crash


def _killed_in_replay(dsn: str, data: Path, env: dict[str, str]) -> Crash:
    """Let the window grow a while longer, SIGKILL the broker, then start it twice with
    ``env`` and SIGKILL each start within its replay: the database store logs that it
    started just before the journal is replayed, and ``env``'s smaller window makes the
    replay checkpoint as it goes."""

    def crash(server: MqstoreServer, rng: random.Random) -> None:
        time.sleep(1.5)
        server.kill()
        for _ in range(2):
            started = server.log_text().count(STORE_STARTED)
            again = _server(dsn, data, env, wait=False)
            deadline = time.monotonic() + 30
            while again.log_text().count(STORE_STARTED) == started:
                assert time.monotonic() < deadline, again.log_text()[-2000:]
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.04))  # a replay takes some tens of milliseconds
            again.kill()

    return crash


def _delivered(dsn: str, data: Path, env: dict[str, str], dest: str) -> list[str]:
    """What a fresh broker on ``data`` delivers of ``dest`` (its durable subscription)."""
    server = _server(dsn, data, env)
    try:
        if dest == QUEUE:
            return [b.removesuffix(BODY_PAD) for b in drain(server.port, QUEUE)]
        return _drain_durable(server.port)
    finally:
        server.stop()


def _check(receipted: list[str], acks: Acks, delivered: list[str]) -> None:
    """Receipted messages whose ACK was never sent come once; receipted ACKs never do.
    (An ACK sent but not receipted before the kill may or may not have been stored.)"""
    expected = set(receipted) - set(acks.tried)
    assert acks.acked and expected, "the rounds acknowledged nothing, or everything"
    assert not acks.back, f"acknowledged messages were delivered again: {acks.back[:10]}"
    back = sorted(set(delivered) & set(acks.acked))
    assert not back, f"acknowledged messages came back: {back[:10]}"
    lost = sorted(expected - set(delivered))
    assert not lost, f"receipted messages were lost: {lost[:10]}"
    twice = sorted({b for b in delivered if delivered.count(b) > 1})
    assert not twice, f"messages were delivered twice: {twice[:10]}"


@pytest.mark.parametrize("env", [CHECKPOINTING, WINDOW_FULL], ids=["checkpointing", "window-full"])
def test_queue_sigkill_in_checkpoints_rotation_and_flow_control_keeps_transactions(
    dsn: str, tmp_path: Path, env: dict[str, str]
) -> None:
    """Transacted and plain SENDs and ACKs on a queue survive kills at any of those points."""
    receipted, acks = _rounds(dsn, tmp_path / "data", env, QUEUE)
    _check(receipted, acks, _delivered(dsn, tmp_path / "data", env, QUEUE))


@pytest.mark.parametrize("env", [CHECKPOINTING, WINDOW_FULL], ids=["checkpointing", "window-full"])
def test_durable_subscriber_sigkill_keeps_receipted_and_drops_acknowledged(
    dsn: str, tmp_path: Path, env: dict[str, str]
) -> None:
    """A durable topic subscription's acks in the window, checkpointed or not, survive kills:
    its receipted messages come once, its acknowledged ones never again."""
    receipted, acks = _rounds(dsn, tmp_path / "data", env, TOPIC)
    _check(receipted, acks, _delivered(dsn, tmp_path / "data", env, TOPIC))


@pytest.mark.parametrize("dest", [QUEUE, TOPIC], ids=["queue", "durable"])
def test_sigkill_in_a_database_outage_then_a_start_before_it_is_back_loses_nothing(
    private_pg: PrivatePostgres, tmp_path: Path, dest: str
) -> None:
    """The database crashes under constant checkpoints, the broker is SIGKILLed while it is
    down and started once before it is back: once both run again, receipted messages come
    once and acknowledged ones never."""
    data = tmp_path / "data"
    crash = _outage(private_pg, data, CHECKPOINTING)
    receipted, acks = _rounds(private_pg.dsn, data, CHECKPOINTING, dest, rounds=2, crash=crash)
    _check(receipted, acks, _delivered(private_pg.dsn, data, CHECKPOINTING, dest))


@pytest.mark.parametrize("dest", [QUEUE, TOPIC], ids=["queue", "durable"])
def test_sigkill_during_a_replay_that_checkpoints_loses_nothing(
    dsn: str, tmp_path: Path, dest: str
) -> None:
    """A broker killed with a large window is started with a small one, so its replay
    checkpoints as it goes, and killed again at random moments of that start-up: once it
    runs, receipted messages come once and acknowledged ones never."""
    data = tmp_path / "data"
    crash = _killed_in_replay(dsn, data, WINDOW_FULL)
    receipted, acks = _rounds(dsn, data, LARGE_WINDOW, dest, rounds=2, crash=crash)
    _check(receipted, acks, _delivered(dsn, data, WINDOW_FULL, dest))
