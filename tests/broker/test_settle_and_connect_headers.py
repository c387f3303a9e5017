"""Headers of ACK, NACK and CONNECT: an ACK or NACK without its 1.2 id header is told what it
lacks; a CONNECT asking for a receipt finds its id on CONNECTED."""

from __future__ import annotations

import pytest

from tests.broker.harness import BrokerThread
from tests.broker.test_protocol import Raw


@pytest.mark.parametrize("command", ["ACK", "NACK"])
def test_a_stomp_12_settle_frame_without_an_id_is_told_to_send_the_ack_header_value(
    mem_broker: BrokerThread, command: str
) -> None:
    client = Raw(mem_broker.port)
    assert client.connect().startswith(b"CONNECTED")
    client.send(f"{command}\nmessage-id:ID:x-1:1:1:1\nsubscription:1\n\n\x00".encode())
    error = client.frame()
    assert error.startswith(b"ERROR\n"), error
    assert f"{command} needs an id header".encode() in error
    assert b"ack header of the MESSAGE" in error
    assert client.closed()


@pytest.mark.parametrize("header", ["receipt", "request-id"])
def test_a_connect_asking_for_a_receipt_gets_its_id_on_connected(
    mem_broker: BrokerThread, header: str
) -> None:
    """As ActiveMQ: a client that waits for the receipt of its CONNECT finds it there."""
    client = Raw(mem_broker.port)
    connected = client.connect(f"{header}:hello-1\n")
    assert connected.startswith(b"CONNECTED\n"), connected
    assert b"\nreceipt-id:hello-1\n" in connected and b"\nresponse-id:hello-1\n" in connected
