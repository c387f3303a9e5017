"""At most ``max_connections`` clients at once (ActiveMQ's maximumConnections): one more is
told why in an ERROR frame and closed, the clients already in are untouched, and a place
freed is taken again. ``mqstore serve`` raises its open-file limit to fit the clients."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest
import stomp

from mqstore.app import FILE_HEADROOM, broker_config
from mqstore.broker import BrokerConfig
from mqstore.errors import ConfigError
from mqstore.settings import load_settings
from mqstore.store import Store
from tests.broker.harness import Collector, connect, running, wait_until


def _refused(port: int) -> Collector:
    """A client turned away: it gets an ERROR frame instead of CONNECTED."""
    col = Collector()
    with pytest.raises(stomp.exception.ConnectFailedException):
        connect(port, listener=col)
    assert col.wait(lambda: bool(col.errors))
    return col


def test_one_client_more_than_the_limit_is_told_why_and_closed(memory_store: Store) -> None:
    with running(memory_store, max_connections=2) as bt:
        first, first_col = connect(bt.port)
        second, _ = connect(bt.port)
        col = _refused(bt.port)
        message = col.errors[0].headers["message"]
        assert "at most 2 connections" in message and "MQSTORE_MAX_CONNECTIONS" in message
        assert bt.snapshot()["refused_connections"] == 1

        first.send("/queue/q", "still served", receipt="r1")  # those in are untouched
        assert first_col.wait(lambda: "r1" in first_col.receipts)
        second.disconnect()
        assert wait_until(lambda: bt.snapshot()["connections"] == 1)
        third, third_col = connect(bt.port)  # the freed place is taken again
        third.subscribe("/queue/q", id="1", ack="auto")
        assert third_col.wait_messages(1)[0].body == "still served"
        third.disconnect()
        first.disconnect()


def test_no_limit_takes_every_client(memory_store: Store) -> None:
    with running(memory_store, max_connections=0) as bt:
        clients = [connect(bt.port)[0] for _ in range(5)]
        assert bt.snapshot()["connections"] == 5
        for conn in clients:
            conn.disconnect()


def test_the_setting_reaches_the_broker_and_bad_values_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MQSTORE_MAX_CONNECTIONS", "7")
    assert broker_config(load_settings()).max_connections == 7
    with pytest.raises(ConfigError, match="max_connections"):
        BrokerConfig(max_connections=-1)


def test_the_open_file_limit_is_raised_to_fit_the_clients() -> None:
    """Started with a soft limit of 64 files, a broker for 500 clients raises it to 756
    (or to the hard limit, if that is lower)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    needed = 500 + FILE_HEADROOM
    expected = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    script = (
        "import resource\n"
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))\n"
        "from mqstore.app import raise_file_limit\n"
        "raise_file_limit(500)\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert int(out.stdout) == expected
