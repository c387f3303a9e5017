"""Fixtures that run real ActiveMQ brokers and real ``mqstore serve`` processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.interop.activemq_broker import ActiveMQBroker, ActiveMQConfig, free_port, port_open


class MqstoreServer:
    """``python -m mqstore serve`` as a child process."""

    def __init__(
        self,
        dsn: str,
        base: Path,
        *,
        name: str,
        journal: bool,
        lock: str = "lease",
        lease_ms: int = 10_000,
        renew_ms: int = 5_000,
    ) -> None:
        self.port = free_port()
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.cmd = [
            sys.executable,
            "-m",
            "mqstore",
            "serve",
            "--dsn",
            dsn,
            "--stomp",
            f"127.0.0.1:{self.port}",
            "--broker-name",
            name,
            "--lock",
            lock,
            "--data-dir",
            str(base),
        ]
        if not journal:
            self.cmd.append("--no-journal")
        self.env = {
            **os.environ,
            "MQSTORE_LEASE_MS": str(lease_ms),
            "MQSTORE_RENEW_MS": str(renew_ms),
            "MQSTORE_CLEANUP_INTERVAL_S": "0",
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, wait: bool = True) -> MqstoreServer:
        log = (self.base / "serve.log").open("ab")
        self.process = subprocess.Popen(
            self.cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        if wait:
            self.wait_serving()
        return self

    def log_text(self) -> str:
        path = self.base / "serve.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def serving(self) -> bool:
        return port_open(self.port)

    def wait_serving(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"mqstore serve exited:\n{self.log_text()[-3000:]}")
            if self.serving():
                return
            time.sleep(0.1)
        raise TimeoutError(f"mqstore serve did not listen:\n{self.log_text()[-3000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def activemq(tmp_path: Path) -> Iterator[Callable[..., ActiveMQBroker]]:
    """Start real ActiveMQ brokers: ``activemq(dsn=..., name=..., ...)``; stopped afterwards."""
    brokers: list[ActiveMQBroker] = []

    def start(*, wait: bool = True, **kwargs: object) -> ActiveMQBroker:
        cfg = ActiveMQConfig(**kwargs)  # type: ignore[arg-type]
        broker = ActiveMQBroker(cfg, tmp_path / f"amq-{len(brokers)}")
        brokers.append(broker)
        return broker.start(wait=wait)

    yield start
    for broker in brokers:
        broker.kill()


@pytest.fixture
def mqstore_server(tmp_path: Path) -> Iterator[Callable[..., MqstoreServer]]:
    """Start ``mqstore serve`` processes; killed afterwards."""
    servers: list[MqstoreServer] = []

    def start(dsn: str, *, wait: bool = True, **kwargs: object) -> MqstoreServer:
        server = MqstoreServer(dsn, tmp_path / f"mqs-{len(servers)}", **kwargs)  # type: ignore[arg-type]
        servers.append(server)
        return server.start(wait=wait)

    yield start
    for server in servers:
        server.kill()
