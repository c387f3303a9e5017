"""SIGTERM while producers pipeline persistent SENDs: ``mqstore serve`` stops cleanly (exit
0, no error logged) and every message it receipted is stored."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.openwire import decode
from tests.integration.test_serve import _free_port, _wait_port

BATCH = 50


def _produce(port: int, name: str, receipted: list[str], stop: threading.Event) -> None:
    """Send batches of receipted persistent SENDs on one connection until the broker
    closes it, recording the bodies whose receipts came back."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00")
        buffer = b""
        while b"\x00" not in buffer:
            buffer += sock.recv(65536)
        buffer = buffer.split(b"\x00", 1)[1]
        batch = 0
        while not stop.is_set():
            bodies = [f"{name}-{batch}-{i}" for i in range(BATCH)]
            frames = b"".join(
                f"SEND\ndestination:/queue/stopping\npersistent:true\nreceipt:{body}\n\n"
                f"{body}\x00".encode()
                for body in bodies
            )
            try:
                sock.sendall(frames)
                pending = set(bodies)
                while pending:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                    *done, buffer = buffer.split(b"\x00")
                    for frame in done:
                        for line in frame.decode().splitlines():
                            if line.startswith("receipt-id:"):
                                body = line.split(":", 1)[1]
                                pending.discard(body)
                                receipted.append(body)
            except OSError:
                return
            batch += 1


@pytest.mark.parametrize("journal", ["--journal", "--no-journal"])
def test_sigterm_under_pipelined_sends_stops_cleanly_keeping_every_receipted_message(
    dsn: str, engine: Engine, tmp_path: Path, journal: str
) -> None:
    port = _free_port()
    log = tmp_path / "serve.log"
    serve = [sys.executable, "-m", "mqstore", "serve", "--dsn", dsn, journal,
             "--stomp", f"127.0.0.1:{port}", "--data-dir", str(tmp_path)]  # fmt: skip
    proc = subprocess.Popen(serve, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=os.environ)
    receipted: list[str] = []
    stop = threading.Event()
    try:
        _wait_port(port, proc, log)
        producers = [
            threading.Thread(target=_produce, args=(port, f"p{n}", receipted, stop))
            for n in range(3)
        ]
        for producer in producers:
            producer.start()
        while len(receipted) < 6 * BATCH:
            assert proc.poll() is None, log.read_text()
            stop.wait(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()
        stop.set()
        for producer in producers:
            producer.join(30)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    output = log.read_text()
    assert "Traceback" not in output and " ERROR " not in output, output
    with engine.connect() as conn:  # a clean stop checkpoints the journal into the tables
        rows = conn.execute(sa.text("SELECT msg FROM activemq_msgs")).scalars()
        stored = [decode(bytes(msg)).text for msg in rows]
    assert len(stored) == len(set(stored))
    assert set(receipted) <= set(stored)
