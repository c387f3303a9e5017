"""Two brokers under one broker name (two ``mqstore serve`` on a host, where the default
name is the same): the one that waits says the lock's holder is another process using this
name, not itself, and how to give each broker its own name."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from mqstore.errors import LockError
from mqstore.lock import ExclusiveLease, LeaseLocker, read_lock
from mqstore.schema import build_schema
from tests.broker.harness import wait_until

SCHEMA = build_schema("")
HINT = (
    "That is this broker's own name: another process uses it, a second broker on this host "
    "(every broker on a host has the same default name, mqstore-<host name>) or one on "
    "another host given this name. `mqstore lock status` names the holder only by it: give "
    "each broker its own name with --broker-name (or MQSTORE_BROKER_NAME)."
)


class Serve:
    """``mqstore serve --no-journal`` under the default broker name, its output in a file."""

    def __init__(self, dsn: str, base: Path) -> None:
        base.mkdir()
        self.log = base / "serve.log"
        env = {k: v for k, v in os.environ.items() if k != "MQSTORE_BROKER_NAME"}
        env.update(MQSTORE_LEASE_MS="4000", MQSTORE_RENEW_MS="1000")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mqstore", "serve", "--dsn", dsn, "--no-journal",
             "--stomp", "127.0.0.1:0", "--data-dir", str(base)],
            stdout=self.log.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env,
        )  # fmt: skip

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def lines(self, part: str) -> list[str]:
        return [line for line in self.text().splitlines() if part in line]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@pytest.fixture
def serves(dsn: str, tmp_path: Path) -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for serve in reversed(started):
        serve.stop()


def test_a_second_serve_under_the_default_name_says_another_process_holds_it(
    dsn: str, engine: Engine, tmp_path: Path, serves: list[Serve]
) -> None:
    """Said once, as a warning, however often the first renews its lease meanwhile."""
    name = f"mqstore-{socket.gethostname()}"
    first = Serve(dsn, tmp_path / "first")
    serves.append(first)
    assert wait_until(lambda: bool(first.lines("serving STOMP")), 60, 0.1), first.text()
    second = Serve(dsn, tmp_path / "second")
    serves.append(second)
    assert wait_until(lambda: bool(second.lines("waiting as slave")), 60, 0.1), second.text()
    for _ in range(2):
        assert _renewed(engine), "no renewal"
    [waiting] = second.lines("waiting as slave")
    assert " WARNING " in waiting, waiting
    assert f"lock held by {name} for another " in waiting, waiting
    assert waiting.endswith(HINT), waiting
    assert first.process.poll() is None and second.process.poll() is None
    with engine.connect() as conn:
        assert read_lock(conn, SCHEMA).broker_name == name


def _lock_time(engine: Engine) -> int | None:
    with engine.connect() as conn:
        return read_lock(conn, SCHEMA).time


def _renewed(engine: Engine) -> bool:
    """Whether the holder renews its lease (TIME moves) within 10 s."""
    before = _lock_time(engine)
    return wait_until(lambda: _lock_time(engine) != before, 10, 0.1)


def _locker(engine: Engine, lease_ms: int = 4000) -> LeaseLocker:
    return LeaseLocker(engine, SCHEMA, "b1", lease_ms=lease_ms, renew_ms=1000, poll_ms=50)


def _waiting(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "waiting as slave" in r.getMessage()]


def test_a_standby_under_the_holders_name_says_so_once_not_at_each_renewal(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    holder = _locker(engine)
    assert holder.acquire(threading.Event())
    standby, stop = _locker(engine), threading.Event()
    waiting = threading.Thread(target=standby.acquire, args=(stop,), daemon=True)
    try:
        with caplog.at_level(logging.INFO, logger="mqstore.lock"):
            waiting.start()
            assert wait_until(lambda: bool(_waiting(caplog)), 10, 0.05)
            for _ in range(3):  # each renewal changes the row the standby reads
                holder.renew()
                time.sleep(0.3)  # several polls of the standby
            stop.set()
            waiting.join(10)
        [record] = _waiting(caplog)
        assert record.levelno == logging.WARNING
        assert record.getMessage().startswith("waiting as slave: lock held by b1 for another ")
        assert record.getMessage().endswith(HINT)
    finally:
        stop.set()
        holder.release()


def test_a_journaled_broker_under_a_running_brokers_name_says_another_process_uses_it(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    running = _locker(engine, lease_ms=1500)
    assert running.acquire(threading.Event())
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(0.2):
            running.renew()

    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    try:
        with caplog.at_level(logging.WARNING, logger="mqstore.lock"), pytest.raises(LockError):
            ExclusiveLease(_locker(engine, lease_ms=1500)).acquire(threading.Event())
        [warned] = [r.getMessage() for r in caplog.records if "is held by b1" in r.getMessage()]
        assert HINT in warned, warned
        assert "an earlier run did not release it" not in warned, warned
    finally:
        stop.set()
        renewer.join(5)
        running.release()
