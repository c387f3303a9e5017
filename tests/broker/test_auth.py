"""Authentication with ``BrokerConfig(users=...)``: only a known login with its passcode."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import pytest

from mqstore.broker.memory_store import MemoryStore
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, connect, wait_until
from tests.broker.test_protocol import Raw


@pytest.fixture
def auth_broker(memory_store: MemoryStore) -> Iterator[BrokerThread]:
    bt = BrokerThread(memory_store, dataclasses.replace(FAST, users={"app": "secret"})).start()
    yield bt
    bt.close()


@pytest.mark.parametrize(
    "headers",
    [
        "",  # no login at all
        "login:nosuchuser\n",  # unknown login, no passcode
        "login:\n",  # empty login, no passcode
        "login:nosuchuser\npasscode:\n",
        "login:nosuchuser\npasscode:secret\n",  # another user's passcode
        "login:\npasscode:secret\n",
        "login:app\n",  # known login, no passcode
        "login:app\npasscode:\n",
        "login:app\npasscode:wrong\n",
        "login:app\npasscode:secret2\n",
    ],
)
def test_connect_without_a_known_login_and_its_passcode_is_refused(
    auth_broker: BrokerThread, memory_store: MemoryStore, headers: str
) -> None:
    raw = Raw(auth_broker.port)
    reply = raw.connect(headers)
    assert reply.startswith(b"ERROR")
    assert b"authentication failed: invalid login or passcode" in reply
    assert raw.closed()
    # Nothing an intruder sends after gets in: the broker drops it (or, after a moment,
    # the connection is reset).
    with contextlib.suppress(OSError):
        for _ in range(50):
            raw.send(b"SEND\ndestination:/queue/secret\npersistent:true\n\nintruder\x00")
    assert wait_until(lambda: auth_broker.snapshot()["connections"] == 0)  # not held open
    assert memory_store.count("queue://secret") == 0


def test_known_login_with_its_passcode_connects_and_sends(
    auth_broker: BrokerThread, memory_store: MemoryStore
) -> None:
    conn, col = connect(auth_broker.port, login="app", passcode="secret")
    conn.send("/queue/ok", "hello", headers={"persistent": "true"}, receipt="r")
    assert col.wait(lambda: "r" in col.receipts)
    assert not col.errors
    assert memory_store.count("queue://ok") == 1
    conn.disconnect()
