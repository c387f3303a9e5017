"""A connection's uncommitted transacted SENDs are bounded: memory alone holds them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mqstore.app import broker_config
from mqstore.broker import BrokerConfig
from mqstore.broker.memory_store import MemoryStore
from mqstore.errors import ConfigError
from mqstore.settings import load_settings
from mqstore.store.port import Store
from tests.broker.harness import BrokerThread, connect, drain, running

LIMIT = 256 * 1024
BODY = "x" * (64 * 1024)
PERSISTENT = {"persistent": "true"}


@pytest.fixture
def bt(any_store: Store) -> Iterator[BrokerThread]:
    with running(any_store, max_transaction_bytes=LIMIT) as thread:
        yield thread


def test_a_transaction_past_the_limit_is_refused_and_rolled_back(bt: BrokerThread) -> None:
    conn, client = connect(bt.port)
    conn.begin("big")
    taken = 0
    for n in range(10):  # 64 KiB each against 256 KiB: the fifth or sixth is refused
        conn.send("/queue/tx", BODY, transaction="big", receipt=f"s{n}")
        client.wait(lambda n=n: f"s{n}" in client.receipts or bool(client.errors), 10)
        if client.errors:
            break
        taken += 1
    assert client.errors, "no ERROR for an oversized transaction"
    assert 4 <= taken <= 5  # the SEND that crosses the limit is still taken
    error = client.errors[0]
    assert "max_transaction_bytes" in error.headers.get("message", "") + error.body
    assert client.disconnected.wait(10)
    assert drain(bt.port, "/queue/tx") == []  # nothing of it was committed

    # Transactions under the limit go on, also one after another on one connection.
    ok, got = connect(bt.port)
    for round_ in range(3):
        tx = f"small-{round_}"
        ok.begin(tx)
        for n in range(3):
            ok.send("/queue/tx", f"{round_}.{n}", transaction=tx, headers={"persistent": "true"})
        ok.commit(tx, receipt=f"c{round_}")
        assert got.wait(lambda r=round_: f"c{r}" in got.receipts, 10)
    assert not got.errors
    ok.disconnect()
    assert drain(bt.port, "/queue/tx") == [f"{r}.{n}" for r in range(3) for n in range(3)]


def test_one_message_larger_than_the_limit_still_goes(bt: BrokerThread) -> None:
    conn, client = connect(bt.port)
    conn.begin("one")
    conn.send("/queue/tx-one", "y" * (2 * LIMIT), transaction="one")
    conn.commit("one", receipt="c")
    assert client.wait(lambda: "c" in client.receipts, 10) and not client.errors
    conn.disconnect()
    assert [len(b) for b in drain(bt.port, "/queue/tx-one")] == [2 * LIMIT]


def test_the_limit_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MQSTORE_TRANSACTION_MB", "3")
    assert broker_config(load_settings()).max_transaction_bytes == 3 << 20


def test_a_begin_past_max_transactions_is_refused_and_the_open_ones_rolled_back(
    memory_store: MemoryStore,
) -> None:
    with running(memory_store, max_transactions=3) as bt:
        conn, client = connect(bt.port)
        for n in range(3):
            conn.begin(f"t{n}", headers={"receipt": f"b{n}"})
            conn.send("/queue/tx-many", f"m{n}", transaction=f"t{n}", headers=PERSISTENT)
        assert client.wait(lambda: {"b0", "b1", "b2"} <= set(client.receipts)), client.errors
        conn.abort("t2")  # a transaction ended makes room for another
        conn.begin("t3", headers={"receipt": "b3"})
        assert client.wait(lambda: "b3" in client.receipts), client.errors
        conn.begin("t4", headers={"receipt": "b4"})  # the fourth open one
        assert client.wait(lambda: bool(client.errors))
        error = client.errors[0]
        message = error.headers.get("message", "")
        assert "max_transactions 3" in message and "'t4'" in message, message
        assert "b4" not in client.receipts
        assert client.disconnected.wait(10)
        assert drain(bt.port, "/queue/tx-many") == []  # the open ones were rolled back


def test_max_transactions_has_a_default_and_refuses_a_negative_value() -> None:
    assert BrokerConfig().max_transactions == 100
    assert BrokerConfig(max_transactions=0).max_transactions == 0  # no limit
    with pytest.raises(ConfigError, match="max_transactions"):
        BrokerConfig(max_transactions=-1)
