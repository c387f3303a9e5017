"""The columnar fast path (``mqstore.openwire.summarize``) gives exactly what the full decoder
gives (``decode_msg``) on every frame: real ActiveMQ rows, edge cases, corrupt frames."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqstore.openwire import (
    ConnectionId,
    ConsumerId,
    Destination,
    DestinationKind,
    JBigString,
    JByte,
    JChar,
    JFloat,
    JInt,
    JLong,
    JShort,
    JString,
    LocalTransactionId,
    Message,
    MessageId,
    MessageKind,
    ProducerId,
    XATransactionId,
    bytes_message,
    encode,
    encode_body,
    encode_map,
    map_message,
    stream_message,
    text_message,
)
from mqstore.openwire.columnar import IDENTITY_FIELDS, SUMMARY_FIELDS, summarize
from spark_etl.decode import (
    DECODED_FIELDS,
    decode_batches,
    decode_columns,
    decode_identity,
    decode_msg,
)
from tests.unit.openwire.fixture_data import available, rows
from tests.unit.openwire.strategies import messages

PRODUCER = "ID:host-40123-1795306854999-1:1:1"
ALL_TYPES: dict[str, Any] = {
    "s": "text",
    "s_nonascii": "ünï €😀 \x00 nul",
    "s_lone": "cut \ud83d",
    "s_forced": JString("x"),
    "s_big": JBigString("y"),
    "s_huge": "z" * 9000,
    "bool_t": True,
    "bool_f": False,
    "byte": JByte(-5),
    "short": JShort(-300),
    "char": JChar("é"),
    "int": JInt(-7),
    "long": JLong(2**40),
    "float": JFloat(1.5),
    "double": 0.1,
    "nan": float("nan"),
    "bytes": b"\x00\xffab",
    "null": None,
    "map": {"a": JInt(1), "b": [True, "x"]},
    "list": [JLong(1), None, b"z"],
}


def _rows_of(cols: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The summarize() columns back as one decode_msg-shaped dict per frame."""
    out = []
    offsets = cols["prop_offsets"]
    for i in range(len(cols["kind"])):
        row = {name: cols[name][i] for name in SUMMARY_FIELDS if name != "properties"}
        lo, hi = offsets[i], offsets[i + 1]
        row["properties"] = (
            None
            if cols["prop_null"][i]
            else dict(zip(cols["prop_keys"][lo:hi], cols["prop_values"][lo:hi], strict=True))
        )
        out.append(row)
    return out


def _decoded_rows(msgs: pa.Array) -> list[dict[str, Any]]:
    table = pa.Table.from_arrays(decode_columns(msgs), names=[n for n, _ in DECODED_FIELDS])
    rows = table.to_pylist()
    for row in rows:
        if row["properties"] is not None:
            row["properties"] = dict(row["properties"])
    return rows


def _check(frames: list[bytes | None]) -> int:
    """Assert the fast path equals decode_msg on every frame; returns the slow-path count."""
    declined = []

    def slow(data: bytes) -> dict[str, Any]:
        declined.append(data)
        return decode_msg(data) | dict(zip(IDENTITY_FIELDS, decode_identity(data), strict=True))

    got = _rows_of(summarize(frames, slow))
    wanted = [decode_msg(frame) for frame in frames]
    # The summary's body_size is the stored content's; decode_columns makes it the payload's.
    for frame, row, want in zip(frames, got, wanted, strict=True):
        summary = {k: v for k, v in want.items() if k not in ("body", "body_size")}
        if frame is None:
            summary["decode_error"] = None
        assert {k: v for k, v in row.items() if k != "body_size"} == summary, frame
    # The Arrow path (string spans gathered by Arrow), per batch and frame by frame.
    assert _decoded_rows(pa.array(frames, pa.binary())) == wanted
    for frame, want in zip(frames, wanted, strict=True):
        assert _decoded_rows(pa.array([frame], pa.binary())) == [want], frame
    return len(declined)


def _ids(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"destination": "queue://Q", "producer_id": PRODUCER, "sequence": 7, **kwargs}


def _text(**kwargs: Any) -> bytes:
    return encode(text_message(kwargs.pop("text", "hello"), **_ids(kwargs)))


def test_every_fixture_row_agrees_and_text_rows_take_the_fast_path() -> None:
    assert available(), "the shared ActiveMQ fixture is missing: put ../shared beside the repo"
    frames: list[bytes | None] = [r.msg for r in rows()]
    declined = _check(frames)
    # Only the MapMessage and StreamMessage bodies need the full decoder.
    assert declined <= 2


def test_common_frames_take_the_fast_path() -> None:
    frames: list[bytes | None] = [
        _text(properties={"a": "x", "n": JInt(i), "l": JLong(i), "b": i % 2 == 0, "d": 2.5})
        for i in range(20)
    ]
    frames += [_text(destination="topic://T", text="ünïcödé ✓", properties={"k": "vé"})]
    frames += [_text(properties={}), _text(properties=None), _text(text=None), None]
    frames += [
        encode(bytes_message(b"\x00\x01", **_ids({}))),
        encode(bytes_message(None, **_ids({}))),
    ]
    assert _check(frames) == 0


def test_properties_of_every_type() -> None:
    frames: list[bytes | None] = [_text(properties={k: v}) for k, v in ALL_TYPES.items()]
    frames.append(_text(properties=ALL_TYPES))
    _check(frames)


_entry = encode_map({"k": "v"})[4:]


def test_null_and_unusual_header_fields() -> None:
    conn = ConnectionId("ID:conn-1")
    base = Message(kind=MessageKind.TEXT, content=encode_body(MessageKind.TEXT, "t", False))
    variants = [
        base,  # no producer, destination, message id, properties
        base.replace(message_id=MessageId(None, None, 5, 6)),
        base.replace(message_id=MessageId("ID:given", ProducerId(None, 1, 2), 5, 6)),
        base.replace(message_id=MessageId("no-prefix", ProducerId("c", 1, 2), 5, 6)),
        base.replace(destination=Destination(DestinationKind.TEMP_QUEUE, None)),
        base.replace(original_destination=Destination.parse("topic://ORIG")),
        base.replace(original_destination=Destination(DestinationKind.QUEUE, "a,b")),
        base.replace(original_destination=Destination(DestinationKind.TEMP_TOPIC, None)),
        base.replace(transaction_id=LocalTransactionId(9, conn)),
        base.replace(transaction_id=LocalTransactionId(9, None)),
        base.replace(original_transaction_id=LocalTransactionId(9, ConnectionId(None))),
        base.replace(transaction_id=XATransactionId(1, b"g", b"b")),
        base.replace(group_id="grp", group_sequence=3, correlation_id="corr", type="T"),
        base.replace(reply_to=Destination.parse("queue://R"), user_id="me"),
        base.replace(target_consumer_id=ConsumerId("c", 1, 2), redelivery_counter=4),
        base.replace(broker_path=("b1", None), cluster=(), received_by_dfbridge=True),
        base.replace(droppable=True, jms_xgroup_first_for_consumer=True, persistent=True),
        base.replace(priority=-3, timestamp=-1, expiration=2**62, arrival=5),
        base.replace(content=None),
        base.replace(content=b"\xff\xff\xff\xff"),  # null text
        base.replace(content=encode_body(MessageKind.TEXT, "zip", True), compressed=True),
        base.replace(marshalled_properties=b"\xff\xff\xff\xff"),  # null map
        base.replace(marshalled_properties=b"\x00\x00\x00\x02" + _entry * 2),  # duplicate key
        base.replace(marshalled_properties=b"\x00\x00\x00\x01" + _entry + b"\x00"),  # trailing
    ]
    assert _check([encode(m) for m in variants]) <= 5


def test_other_kinds() -> None:
    frames: list[bytes | None] = [
        encode(map_message({"k": JInt(1)}, **_ids({}))),
        encode(map_message(None, **_ids({}))),
        encode(stream_message([1, "a"], **_ids({}))),
        encode(stream_message(None, **_ids({}))),
        encode(bytes_message(b"abc", **_ids({"compress": True}))),
    ]
    for kind in (MessageKind.OBJECT, MessageKind.MESSAGE, MessageKind.BLOB):
        frames.append(encode(Message(kind=kind, content=b"\xac\xed")))
        frames.append(encode(Message(kind=kind)))
    _check(frames)


def test_corrupt_frames_give_the_same_decode_error() -> None:
    good = _text(properties={"a": "x", "n": JInt(1)}, correlation_id="c", type="T")
    frames: list[bytes | None] = [good[:n] for n in range(len(good))]
    for i in range(len(good)):
        for byte in (0x00, 0x01, 0x02, 0x7F, 0xC0, 0xED, 0xFF):
            frames.append(good[:i] + bytes([byte]) + good[i + 1 :])
    frames += [good + b"\x00", b"", b"\x00\x00\x00\x05\x1c\x01"]
    _check(frames)
    errors = [decode_msg(f)["decode_error"] for f in frames[: len(good)]]
    assert all(errors)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages(), st.data())
def test_arbitrary_messages_and_mutations(drawn: tuple[Message, Any, Any], data: Any) -> None:
    frame = encode(drawn[0])
    at = data.draw(st.integers(0, len(frame) - 1))
    flipped = frame[:at] + bytes([data.draw(st.integers(0, 255))]) + frame[at + 1 :]
    _check([frame, flipped, frame[:at]])


def test_decode_batches_builds_the_same_columns() -> None:
    frames: list[bytes | None] = [_text(properties=ALL_TYPES), None, b"bad", _text()]
    batch = pa.RecordBatch.from_arrays(
        [pa.array([1, 2, 3, 4]), pa.array(frames, pa.binary())], names=["id", "msg"]
    )
    (out,) = decode_batches(iter([batch]), "msg", keep_msg=False)
    assert out.schema.names[0] == "id" and "msg" not in out.schema.names
    got = out.to_pylist()
    for frame, row in zip(frames, got, strict=True):
        want = decode_msg(frame)
        props = row.pop("properties")
        assert (dict(props) if props is not None else None) == want.pop("properties")
        assert {k: row[k] for k in want} == want


@pytest.mark.parametrize(
    "texts",
    [
        ["plain", "ünï €", ""],  # ASCII and UTF-8 bodies come straight from the frames
        ["a", "nul \x00 inside", "b"],  # C0 80 in modified UTF-8: decoded in Python
        ["a", "pair 😀", "b"],  # a surrogate pair (CESU-8)
        [None, None],
        ["a", "raw NUL"],  # a raw NUL byte (as ActiveMQ's STOMP stores text): read as NUL
        ["a", "lone \ud800"],  # a lone surrogate: '?' as Java's UTF-8 encoder writes it
    ],
)
def test_decode_columns_text_column(texts: list[str | None]) -> None:
    frames: list[bytes | None] = [_text(text=t) for t in texts]
    frames += [None, b"bad", encode(map_message({"k": JInt(1)}, **_ids({})))]
    frames.append(encode(text_message("zipped", **_ids({"compress": True}))))
    frames.append(_text(text="tail"))
    if "raw NUL" in texts:
        frames = [f.replace(b"raw NUL", b"raw\x00NUL") if f else f for f in frames]
    want = [decode_msg(f) for f in frames]
    msgs = pa.array([b"pad", *frames], pa.binary())[1:]  # a slice: non-zero offset
    assert _decoded_rows(msgs) == want
    assert _decoded_rows(pa.array(frames, pa.large_binary())) == want
    assert _decoded_rows(pa.array([None, None], pa.binary())) == [decode_msg(None)] * 2
    assert _decoded_rows(pa.array([], pa.binary())) == []


def test_every_kind_but_text_has_its_payload_in_body_and_body_size_is_its_size() -> None:
    ids = _ids({})
    payloads = {
        "bytes": (encode(bytes_message(b"\x00\xffraw", **ids)), b"\x00\xffraw"),
        "bytes zipped": (
            encode(bytes_message(b"z" * 300, **_ids({"compress": True}))),
            b"z" * 300,
        ),
        "empty bytes": (encode(bytes_message(b"", **ids)), b""),
        "map": (encode(map_message({"k": JInt(1)}, **ids)), encode_map({"k": JInt(1)})),
        "map zipped": (
            encode(map_message({"k": JInt(1)}, **_ids({"compress": True}))),
            encode_map({"k": JInt(1)}),
        ),
        "stream": (
            encode(stream_message([1, "a"], **ids)),
            encode_body(MessageKind.STREAM, [1, "a"], False),
        ),
        "object": (encode(Message(kind=MessageKind.OBJECT, content=b"\xac\xed")), b"\xac\xed"),
        "no content": (encode(Message(kind=MessageKind.MESSAGE)), None),
    }
    frames = [frame for frame, _ in payloads.values()]
    rows = _decoded_rows(pa.array(frames, pa.binary()))
    for name, row, (frame, body) in zip(payloads, rows, payloads.values(), strict=True):
        assert row["decode_error"] is None, name
        assert (row["body"], row["body_size"]) == (body, len(body or b"")), name
        assert decode_msg(frame)["body"] == body, name


def test_a_text_body_size_is_its_utf8_length_and_its_body_is_in_text() -> None:
    texts = ["thirteen char", "", "ünï €😀", None]
    frames: list[bytes | None] = [_text(text=t) for t in texts]
    frames.append(encode(text_message("zipped", **_ids({"compress": True}))))
    want = [13, 0, len("ünï €😀".encode()), 0, 6]
    for row in _decoded_rows(pa.array(frames, pa.binary())) + [decode_msg(f) for f in frames]:
        assert row["body"] is None and row["kind"] == "text"
    assert [r["body_size"] for r in _decoded_rows(pa.array(frames, pa.binary()))] == want
    assert [decode_msg(f)["body_size"] for f in frames] == want


def test_a_null_msg_is_undecodable() -> None:
    assert decode_msg(None)["decode_error"] == "MSG is NULL"
    rows = _decoded_rows(pa.array([None, _text()], pa.binary()))
    assert [r["decode_error"] for r in rows] == ["MSG is NULL", None]
    assert rows[0]["kind"] is None and rows[0]["body_size"] is None
