"""Queue send/receive, ack modes and frames over real sockets."""

from __future__ import annotations

from tests.broker.harness import BrokerThread, connect


def test_queue_send_receive_auto(broker: BrokerThread) -> None:
    prod, _ = connect(broker.port)
    cons, col = connect(broker.port)
    cons.subscribe("/queue/a", id="1", ack="auto")
    for i in range(5):
        prod.send("/queue/a", f"m{i}", headers={"persistent": "true", "x-custom": "v"})
    msgs = col.wait_messages(5)
    assert [m.body for m in msgs] == [f"m{i}" for i in range(5)]
    assert msgs[0].headers["x-custom"] == "v"
    assert msgs[0].headers["persistent"] == "true"
    assert msgs[0].headers["destination"] == "/queue/a"
    prod.disconnect()
    cons.disconnect()
