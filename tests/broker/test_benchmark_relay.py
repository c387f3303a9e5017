"""The relay that benchmarks/activemq/compare.py measures as the clients' ceiling must serve
every workload in full (every message delivered once the consumers are done), or its
figures would be too high."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import stomp_relay  # noqa: E402
import stomppy_workloads  # noqa: E402


@pytest.fixture(params=[False, True], ids=["relay", "relay-fsync"])
def relay_port(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[int]:
    port, stop = stomp_relay.spawn(tmp_path, request.param)
    try:
        yield port
    finally:
        stop()
    if request.param:  # every SEND reached the file before its receipt
        assert (tmp_path / "relay.log").stat().st_size == 5 * 400 * len(stomppy_workloads.BODY)


def test_relay_serves_every_workload(relay_port: int) -> None:
    for workload in "abcde":
        # The assertion is run_workload's own: it raises when a receipt or a message is
        # missing (every producer waits for its receipts, every consumer for all its messages).
        stomppy_workloads.run_workload(workload, relay_port, 400, f"relay.{workload}")
