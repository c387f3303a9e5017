"""The relay that benchmarks/activemq/compare.py measures as the clients' ceiling must serve
every workload in full (every message delivered once the consumers are done), or its
figures would be too high."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import stomppy_workloads  # noqa: E402


@pytest.fixture(params=[False, True], ids=["relay", "relay-fsync"])
def relay_port(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[int]:
    port_file = tmp_path / "port"
    cmd = [sys.executable, str(BENCHMARKS / "stomp_relay.py"), "--port-file", str(port_file)]
    if request.param:
        cmd += ["--fsync", str(tmp_path / "relay.log")]
    proc = subprocess.Popen(cmd)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "relay did not start"
            time.sleep(0.05)
        yield int(port_file.read_text())
    finally:
        proc.kill()
        proc.wait()
    if request.param:  # every SEND reached the file before its receipt
        assert (tmp_path / "relay.log").stat().st_size == 5 * 400 * len(stomppy_workloads.BODY)


def test_relay_serves_every_workload(relay_port: int) -> None:
    for workload in "abcde":
        # run_workload raises if a receipt or a message is missing (consumers wait for all)
        seconds = stomppy_workloads.run_workload(workload, relay_port, 400, f"relay.{workload}")
        assert seconds > 0
