"""Builders reproduce, byte for byte, what ActiveMQ stored for the fixture's sends."""

from __future__ import annotations

import zlib

import pytest

from mqstore.openwire import (
    Destination,
    EncodeError,
    JInt,
    JLong,
    MessageKind,
    ProducerId,
    bytes_message,
    decode,
    encode,
    map_message,
    stream_message,
    text_message,
)

from .fixture_data import available, rows

assert available(), "the shared ActiveMQ fixture is missing: put ../shared beside the repository"
STOMP_PRODUCER = "ID:vm-43775-1795306854999-3:4:-1:1"
JAVA_PRODUCER = "ID:vm-38831-1795306860829-1:1:1:1"


def _msg(row_id: int) -> bytes:
    return next(r.msg for r in rows() if r.id == row_id)


def test_text_message_matches_stomp_row_s1() -> None:
    msg = text_message(
        "stomp text p0",
        destination="queue://FIXTURE.Q",
        producer_id=STOMP_PRODUCER,
        sequence=1,
        broker_sequence_id=13,
        timestamp=1795306859007,
        broker_in_time=1795306859008,
        priority=0,
        command_id=3,
        properties={"str_prop": "alpha", "num_as_str": "17", "fixture_tag": "S1"},
    )
    assert encode(msg) == _msg(1)


def test_text_message_with_headers_matches_row_s4() -> None:
    msg = text_message(
        "stomp text p4 corr/type/expires",
        destination=Destination.queue("FIXTURE.Q"),
        producer_id=ProducerId.parse(STOMP_PRODUCER),
        sequence=4,
        broker_sequence_id=16,
        timestamp=1795306859062,
        expiration=2110666859005,
        correlation_id="corr-stomp-0001",
        type="fixture.type.stomp",
        command_id=6,
        properties={"fixture_tag": "S4"},
    )
    assert encode(msg) == _msg(4)


def test_bytes_message_matches_row_s6() -> None:
    msg = bytes_message(
        bytes.fromhex("00102030405060708090a0b0c0d0e0f000ff"),
        destination="queue://FIXTURE.Q",
        producer_id=STOMP_PRODUCER,
        sequence=6,
        broker_sequence_id=18,
        timestamp=1795306859074,
        command_id=8,
        properties={"kind": "bytes", "fixture_tag": "S6"},
    )
    assert encode(msg) == _msg(6)


def test_typed_properties_match_openwire_row_j1() -> None:
    msg = text_message(
        "ow text p0 typed props",
        destination="queue://FIXTURE.Q",
        producer_id=JAVA_PRODUCER,
        sequence=1,
        broker_sequence_id=30,
        timestamp=1795306861186,
        broker_in_time=1795306861206,
        priority=0,
        command_id=5,
        properties={
            "str_prop": "hello world",
            "double_prop": 2.5,
            "int_prop": 42,
            "bool_prop": True,
            "long_prop": JLong(1234567890123),
        },
    )
    assert encode(msg) == _msg(12)


def test_map_and_stream_messages_match_rows_j5_j6() -> None:
    common = {"destination": "queue://FIXTURE.Q", "producer_id": JAVA_PRODUCER}
    entries = {
        "b": True,
        "s": "map string",
        "d": 3.5,
        "i": JInt(42),
        "raw": b"\x01\x02\x03",
        "l": JLong(9007199254740993),
    }
    j5 = map_message(
        entries, sequence=5, broker_sequence_id=34, timestamp=1795306861324,
        broker_in_time=1795306861332, command_id=9, **common,
    )  # fmt: skip
    assert encode(j5) == _msg(16)
    j6 = stream_message(
        ["stream string", JInt(7), False], sequence=6, broker_sequence_id=35,
        timestamp=1795306861345, broker_in_time=1795306861347, command_id=10, **common,
    )  # fmt: skip
    assert encode(j6) == _msg(17)


def test_compressed_bodies_follow_activemq_layouts() -> None:
    common = {"destination": "topic://T", "producer_id": "ID:h-1:1:-1:1", "sequence": 1}
    text = decode(encode(text_message("héllo " * 100, compress=True, **common)))
    assert text.compressed and text.text == "héllo " * 100
    assert zlib.decompress(text.content or b"")[:4] == len(("héllo " * 100).encode()).to_bytes(4)
    data = bytes(range(256)) * 10
    raw = decode(encode(bytes_message(data, compress=True, **common)))
    assert raw.content is not None and raw.content[:4] == len(data).to_bytes(4, "big")
    assert raw.bytes_body == data
    mapped = decode(encode(map_message({"k": "v" * 500}, compress=True, **common)))
    assert mapped.map_body == {"k": "v" * 500}
    stream = decode(encode(stream_message([1, "x"], compress=True, **common)))
    assert stream.stream_body == [1, "x"]


def test_null_and_empty_bodies() -> None:
    common = {"destination": "queue://Q", "producer_id": "ID:h-1:1:-1:1", "sequence": 2}
    assert decode(encode(text_message(None, **common))).text is None
    assert decode(encode(text_message("", **common))).text == ""
    empty_map = map_message({}, **common)
    assert empty_map.content is None and decode(encode(empty_map)).map_body == {}
    assert decode(encode(bytes_message(b"", **common))).bytes_body == b""


def test_builder_defaults_mimic_a_persistent_stomp_send() -> None:
    msg = text_message("x", destination="queue://Q", producer_id="ID:h-1:2:-1:3", sequence=7)
    assert msg.kind is MessageKind.TEXT and msg.persistent and msg.response_required
    assert msg.priority == 4 and msg.expiration == 0 and msg.broker_out_time == 0
    assert msg.broker_in_time == msg.timestamp > 0
    assert msg.msgid_prod == "ID:h-1:2:-1:3" and msg.msgid_seq == 7
    assert msg.jms_message_id == "ID:h-1:2:-1:3:7"
    assert msg.producer_id == msg.message_id.producer_id if msg.message_id else False
    assert msg.marshalled_properties is None


def test_builder_rejects_bad_input() -> None:
    common = {"destination": "queue://Q", "producer_id": "ID:h-1:1:-1:1", "sequence": 1}
    with pytest.raises(EncodeError):
        text_message("x", **{**common, "priority": 10})
    with pytest.raises(EncodeError):
        text_message("x", **{**common, "destination": "nowhere"})
    with pytest.raises(EncodeError):
        text_message("x", **{**common, "properties": {"n": JInt(2**31)}})
    with pytest.raises(EncodeError):
        text_message("x", **{**common, "properties": {"o": object()}})
    with pytest.raises(EncodeError):
        encode(text_message("x", **common).replace(correlation_id="é" * 40000))


# Checked against ActiveMQ 5.17's ActiveMQDestination.setPhysicalName, which unmarshalling a
# stored message calls for its destination, originalDestination and replyTo: it throws for
# these, so a row naming one could never be loaded by ActiveMQ.
_UNREADABLE_NAMES = [
    "",
    " ",
    "\x01",
    "\t \n",  # Java's trim() strips every char up to U+0020
    "a,queue://",  # a composite part with an empty name
    "a,topic:// ",
    "b,temp-queue://",
    "Q?a=%",  # options after '?' go through URLDecoder
    "Q?a=%2",
    "Q?%=1",
    "Q?a=b&c=%zz",
    "a,b?x=%",
    "Q?a=1?b=%",
]
# ... and accepts these.
_READABLE_NAMES = [
    "Q",
    " Q ",
    "?",
    "Q?a=b&c",
    "Q?%zz",  # no '=': not decoded
    "Q?b=%?a=1",  # only the part after the last '?' is parsed
    "Q?a=%41",
    "Q?a=%e2%9c%93",
    "a,b",
    ",",
    "a,,b",
    "a, ",
    "a,queue://x",
    "\u3000",  # not trimmed by Java
]


@pytest.mark.parametrize("name", _UNREADABLE_NAMES)
@pytest.mark.parametrize("field", ["destination", "reply_to"])
def test_builder_refuses_destination_names_activemq_cannot_read(name: str, field: str) -> None:
    common = {"destination": "queue://Q", "producer_id": "ID:h-1:1:-1:1", "sequence": 1}
    for value in (f"queue://{name}", Destination.topic(name)):
        with pytest.raises(
            EncodeError, match=f"{field.replace('_', '-')} .*ActiveMQ could not read"
        ):
            text_message("x", **{**common, field: value})


@pytest.mark.parametrize("name", _READABLE_NAMES)
def test_builder_accepts_destination_names_activemq_reads(name: str) -> None:
    common = {"producer_id": "ID:h-1:1:-1:1", "sequence": 1}
    msg = text_message("x", destination=f"queue://{name}", reply_to=f"topic://{name}", **common)
    assert decode(encode(msg)).destination == Destination.queue(name)
