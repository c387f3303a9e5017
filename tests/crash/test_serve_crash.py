"""SIGKILL of ``mqstore serve`` under load: after a restart every receipted message is
delivered and no acknowledged one comes back (journaled, with nothing checkpointed)."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

from tests.broker.harness import connect, drain
from tests.interop.conftest import MqstoreServer

QUEUE = "/queue/crash.serve"


def _produce(port: int, tag: str, receipted: list[str], stop: threading.Event) -> None:
    try:
        conn, client = connect(port)
        for i in range(100_000):
            if stop.is_set():
                return
            body = f"{tag}-m{i}"
            conn.send(QUEUE, body, headers={"persistent": "true"}, receipt=body)
            if not client.wait(lambda b=body: b in client.receipts, 5):
                return
            receipted.append(body)
    except Exception:  # the server was killed under us
        return


def _consume(port: int, acked: list[str], stop: threading.Event) -> None:
    try:
        conn, client = connect(port)
        conn.subscribe(
            QUEUE, id="1", ack="client-individual", headers={"activemq.prefetchSize": "10"}
        )
        handled = 0
        while not stop.is_set():
            if not client.wait(lambda h=handled: len(client.messages) > h, 0.2):
                continue
            frame = client.messages[handled]
            handled += 1
            if random.random() < 0.7:  # leave some unacknowledged
                rid = f"ack-{frame.body}"
                conn.ack(frame.headers["ack"], receipt=rid)
                if not client.wait(lambda r=rid: r in client.receipts, 5):
                    return
                acked.append(frame.body)
    except Exception:
        return


def test_sigkill_loses_no_receipted_message_and_resurrects_no_ack(dsn: str, tmp_path: Path) -> None:
    os.environ["MQSTORE_CHECKPOINT_INTERVAL_MS"] = "600000"  # keep it all in the journal
    try:
        rounds = int(os.environ.get("MQSTORE_CRASH_ROUNDS_SERVE", "3"))
        receipted: list[str] = []
        acked: list[str] = []
        for round_no in range(rounds):
            server = MqstoreServer(
                dsn, tmp_path / "data", name="crash", journal=True, lock="none"
            ).start()
            stop = threading.Event()
            workers = [
                threading.Thread(
                    target=_produce, args=(server.port, f"r{round_no}", receipted, stop)
                ),
                threading.Thread(target=_consume, args=(server.port, acked, stop)),
            ]
            for w in workers:
                w.start()
            time.sleep(random.uniform(1.0, 2.5))
            server.kill()
            stop.set()
            for w in workers:
                w.join(10)
            assert receipted, f"round {round_no}: nothing was sent before the kill"
        server = MqstoreServer(
            dsn, tmp_path / "data", name="crash", journal=True, lock="none"
        ).start()
        try:
            delivered = drain(server.port, QUEUE)
        finally:
            server.stop()
    finally:
        del os.environ["MQSTORE_CHECKPOINT_INTERVAL_MS"]
    expected = set(receipted) - set(acked)
    assert acked and expected, "the rounds acknowledged nothing, or everything"
    assert not set(delivered) & set(acked), "an acknowledged message came back"
    assert expected <= set(delivered), f"lost: {sorted(expected - set(delivered))[:10]}"
    assert len(delivered) == len(set(delivered)), "a message was delivered twice"
