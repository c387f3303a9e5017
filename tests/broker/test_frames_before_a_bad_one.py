"""Frames a client sent before a malformed one are acted on, however the bytes arrived."""

from __future__ import annotations

from tests.broker.harness import BrokerThread, drain
from tests.broker.test_protocol import Raw

GOOD = b"SEND\ndestination:/queue/kept\npersistent:true\nreceipt:good\n\nkept\x00"
BAD = b"SEND\ndestination:/queue/kept\nbad:esc\\t\n\nlost\x00"


def test_a_send_pipelined_with_a_malformed_frame_is_stored_and_receipted_first(
    broker: BrokerThread,
) -> None:
    client = Raw(broker.port)
    assert client.connect().startswith(b"CONNECTED")
    client.send(GOOD + BAD)  # one write: both usually arrive in one read
    receipt = client.frame()
    error = client.frame()
    assert receipt.startswith(b"RECEIPT\nreceipt-id:good\n"), receipt
    assert error.startswith(b"ERROR\n") and b"undefined escape" in error, error
    assert client.closed()
    assert drain(broker.port, "/queue/kept") == ["kept"]


def test_frames_sent_with_the_connect_frame_before_a_malformed_one_are_acted_on(
    broker: BrokerThread,
) -> None:
    client = Raw(broker.port)
    client.send(b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00" + GOOD + BAD)
    assert client.frame().startswith(b"CONNECTED")
    assert client.frame().startswith(b"RECEIPT\nreceipt-id:good\n")
    assert client.frame().startswith(b"ERROR\n")
    assert drain(broker.port, "/queue/kept") == ["kept"]


def test_every_pipelined_send_stored_before_a_refused_frame_gets_its_receipt_first(
    broker: BrokerThread,
) -> None:
    """A client resumes from its first SEND without a receipt: one stored but not
    receipted before the ERROR would be sent, and stored, twice."""
    client = Raw(broker.port)
    assert client.connect().startswith(b"CONNECTED")
    sends = b"".join(
        f"SEND\ndestination:/queue/kept\npersistent:true\nreceipt:r{i}\n\nm{i}\x00".encode()
        for i in range(20)
    )
    client.send(sends + b"SEND\ndestination:/nowhere/x\nreceipt:bad\n\nlost\x00")
    frames = [client.frame() for _ in range(21)]
    receipts = [f for f in frames if f.startswith(b"RECEIPT\n")]
    assert len(receipts) == 20, frames
    assert frames[-1].startswith(b"ERROR\n") and b"unsupported destination" in frames[-1]
    assert client.closed()
    assert drain(broker.port, "/queue/kept") == [f"m{i}" for i in range(20)]
