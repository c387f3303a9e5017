"""``mqstore serve`` as operators run it: metrics endpoint, SIGTERM, the lease released."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import stomp
from sqlalchemy.engine import Engine

from mqstore import app, migrate
from mqstore.broker import Broker, BrokerConfig
from mqstore.settings import load_settings
from mqstore.store import PostgresStore, Store


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.3):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(log.read_text())


def test_metrics_sigterm_and_lease_release(dsn: str, engine: Engine, tmp_path: Path) -> None:
    stomp_port, metrics_port = _free_port(), _free_port()
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqstore", "serve", "--dsn", dsn, "--no-journal",
         "--lock", "lease", "--broker-name", "ops-test", "--stomp", f"127.0.0.1:{stomp_port}",
         "--metrics-port", str(metrics_port), "--metrics-host", "0.0.0.0",
         "--data-dir", str(tmp_path)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env={**os.environ, "MQSTORE_LEASE_MS": "4000", "MQSTORE_RENEW_MS": "1000"},
    )  # fmt: skip
    try:
        _wait_port(stomp_port, proc, log)
        conn = stomp.Connection12([("127.0.0.1", stomp_port)], heartbeats=(0, 0))
        conn.connect(wait=True)
        for i in range(3):
            conn.send("/queue/ops", f"m{i}", headers={"persistent": "true"})
        conn.disconnect(receipt="bye")
        with engine.connect() as c:
            holder = c.execute(sa.text("SELECT broker_name FROM activemq_lock")).scalar()
        assert holder == "ops-test"
        # Every address: also one that is not 127.0.0.1 (a scraper on another host).
        body = urllib.request.urlopen(f"http://127.0.0.2:{metrics_port}/metrics").read().decode()
        assert "queue://ops" in body
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    with engine.connect() as c:
        row = c.execute(sa.text("SELECT broker_name, time FROM activemq_lock")).one()
        depth = c.execute(sa.text("SELECT count(*) FROM activemq_msgs")).scalar()
    assert tuple(row) == (None, 0), "the lease was not released as ActiveMQ releases it"
    assert depth == 3
    assert "passcode" not in log.read_text()


def test_serve_hands_the_broker_settings_to_the_broker(
    empty_engine: Engine, empty_dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    migrate.upgrade(empty_engine)
    configs: list[BrokerConfig] = []
    stores: list[Store] = []

    class Recording(Broker):
        def __init__(self, store: Store, config: BrokerConfig) -> None:
            configs.append(config)
            stores.append(store)
            super().__init__(store, config)

    def no_loop(main: Coroutine[Any, Any, None], kind: str) -> None:
        main.close()

    monkeypatch.setattr(app, "Broker", Recording)
    monkeypatch.setattr(app.eventloop, "run", no_loop)
    users = tmp_path / "users.properties"
    users.write_text("# logins\napp = s3cret\nops=pw=with=equals\n")
    env = {
        "MQSTORE_CLEANUP_INTERVAL_S": "5",
        "MQSTORE_EXPIRY_BATCH": "7",
        "MQSTORE_MAX_MESSAGE_BYTES": str(20 * 1024 * 1024),
        "MQSTORE_USERS_FILE": str(users),
        "MQSTORE_QUEUE_PREFETCH": "10",
        "MQSTORE_MAX_REDELIVERIES": "2",
        "MQSTORE_REDELIVERY_DELAY_MS": "50",
        "MQSTORE_INDIVIDUAL_DLQ": "true",
        "MQSTORE_HEARTBEAT_MS": "0",
        "MQSTORE_TOPIC_HIGH_WATER_MB": "2",
        "MQSTORE_TOPIC_PENDING_LIMIT": "500",
        "MQSTORE_MAX_TRANSACTIONS": "7",
        "MQSTORE_METRICS_PER_DESTINATION": "false",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    app.serve(load_settings(dsn=empty_dsn, journal=False, lock="none"), "127.0.0.1", 0)
    [config] = configs
    # the store cleans itself, once per interval: the broker does not repeat it
    assert config.cleanup_interval == 0 and config.expiry_batch == 7
    [store] = stores
    assert isinstance(store, PostgresStore) and store.cleanup_interval_s == 5
    assert config.limits.max_frame_size > 20 * 1024 * 1024  # a 20 MiB message fits a frame
    assert config.limits.max_message_bytes == 20 * 1024 * 1024  # refused by name past it
    assert config.users == {"app": "s3cret", "ops": "pw=with=equals"}
    assert config.queue_prefetch == 10 and config.heartbeat_ms == (0, 0)
    assert config.redelivery.maximum_redeliveries == 2
    assert config.redelivery.delay(1) == config.redelivery.delay(2) == 50
    assert config.dlq_for("queue://orders") == "queue://ActiveMQ.DLQ.Queue.orders"
    assert (config.topic_high_water, config.topic_low_water) == (2 << 20, 1 << 20)
    assert config.topic_pending_limit == 500
    assert config.max_transactions == 7
    assert config.metrics_per_destination is False


def serve_until_listening(
    dsn: str, tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """``mqstore serve`` (no journal, no lock) with ``args`` and ``env`` added to this
    process's environment; returns it and its first line of output once it printed it (or
    exited)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqstore", "serve", "--dsn", dsn, "--no-journal", "--lock",
         "none", "--data-dir", str(tmp_path), "--log-level", "WARNING", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert proc.stdout is not None
    return proc, proc.stdout.readline()


def test_serve_listens_on_an_ipv6_address_given_in_brackets(dsn: str, tmp_path: Path) -> None:
    proc, line = serve_until_listening(dsn, tmp_path, "--stomp", "[::1]:0")
    try:
        assert line.startswith("mqstore serving STOMP on [::1]:"), (line, proc.poll())
        port = int(line.rsplit(":", 1)[1])
        conn = stomp.Connection12([("::1", port)], heartbeats=(0, 0))
        conn.connect(wait=True)
        conn.disconnect()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_serve_on_an_address_it_cannot_listen_on_names_it(dsn: str, tmp_path: Path) -> None:
    proc, _ = serve_until_listening(dsn, tmp_path, "--stomp", "no-such-host.invalid:61613")
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stderr
    assert "cannot listen for STOMP on no-such-host.invalid:61613" in stderr, stderr
    assert "--stomp" in stderr and "Traceback" not in stderr


def test_a_second_serve_on_the_same_data_directory_names_the_running_one(
    dsn: str, tmp_path: Path
) -> None:
    """Both would run under the same default broker name: the second must not wait out the
    first's lease and then tell the operator to rename a broker that is this very one."""
    first = subprocess.Popen(
        [sys.executable, "-m", "mqstore", "serve", "--dsn", dsn, "--data-dir", str(tmp_path),
         "--stomp", "127.0.0.1:0", "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert first.stdout is not None
        line = first.stdout.readline()
        assert "serving STOMP" in line, first.stderr.read() if first.stderr else ""
        second = subprocess.run(
            [sys.executable, "-m", "mqstore", "serve", "--dsn", dsn, "--data-dir",
             str(tmp_path), "--stomp", "127.0.0.1:0", "--log-level", "WARNING"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert second.returncode == 2, second.stderr
        assert f"is locked by another process (pid {first.pid})" in second.stderr
        assert "another `mqstore serve`" in second.stderr and "--broker-name" not in second.stderr
        assert first.poll() is None  # the running broker goes on
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(30)


def _first_to_exit(procs: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    """The first of ``procs`` to exit (the others may go on)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                return proc
        time.sleep(0.05)
    raise AssertionError("neither `mqstore serve` exited")


def test_two_serves_started_together_on_a_new_data_directory_one_is_refused(
    dsn: str, tmp_path: Path
) -> None:
    """Both would find no journal directory yet, and go on to wait for the lease held under
    their common name: the claim on the directory is atomic, so exactly one serves and the
    other is refused at once, naming it."""
    for attempt in range(5):
        data_dir = tmp_path / f"data-{attempt}"  # does not exist yet
        command = [sys.executable, "-m", "mqstore", "serve", "--dsn", dsn, "--data-dir",
                   str(data_dir), "--stomp", "127.0.0.1:0", "--log-level", "WARNING"]  # fmt: skip
        procs = [
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        try:
            refused = _first_to_exit(procs)
            [serving] = [proc for proc in procs if proc is not refused]
            _, stderr = refused.communicate(timeout=60)
            assert refused.returncode == 2, stderr
            lines = stderr.strip().splitlines()
            assert len(lines) == 1, stderr
            assert f"is locked by another process (pid {serving.pid})" in lines[0], stderr
            assert "another `mqstore serve`" in lines[0] and "--broker-name" not in lines[0]
            assert serving.stdout is not None
            assert "serving STOMP" in serving.stdout.readline(), serving.poll()
            serving.send_signal(signal.SIGTERM)
            assert serving.wait(30) == 0
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)


def test_a_serve_that_cannot_reach_its_database_leaves_no_data_directory(tmp_path: Path) -> None:
    """The journal directory is claimed first; a serve refused before it used the journal
    removes what it made, so no empty data directory is later taken for a store."""
    data_dir = tmp_path / "data"

    def serve_unreachable() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mqstore", "serve", "--dsn", "postgresql://u@127.0.0.1:1/db",
             "--data-dir", str(data_dir), "--stomp", "127.0.0.1:0"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    result = serve_unreachable()
    assert result.returncode == 2, result.stderr
    assert "cannot connect" in result.stderr, result.stderr
    assert not data_dir.exists()
    (data_dir / "journal").mkdir(parents=True)  # made before: it stays, and stays empty
    again = serve_unreachable()
    assert again.returncode == 2, again.stderr
    assert (data_dir / "journal").is_dir()
