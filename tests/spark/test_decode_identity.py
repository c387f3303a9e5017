"""The decoding pass gives the key inside ``MSG`` (``container``, ``msgid_prod``,
``msgid_seq``, which the audit compares with the row's columns) exactly as ``decode`` reads
it from the header, for frames the columnar fast path reads and for those it declines."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqstore.openwire import (
    DecodeError,
    Destination,
    DestinationKind,
    JInt,
    JLong,
    Message,
    MessageId,
    MessageKind,
    ProducerId,
    decode,
    encode,
    encode_body,
    encode_map,
    replace_lone_surrogates,
)
from mqstore.openwire.builders import build_message
from mqstore.openwire.columnar import IDENTITY_FIELDS, summarize
from spark_etl.decode import (
    DECODED_FIELDS,
    IDENTITY_COLUMNS,
    decode_batches,
    decode_columns,
    decode_identity,
    decode_msg,
)
from spark_etl.identity import identity_columns
from tests.unit.openwire.fixture_data import available, rows
from tests.unit.openwire.strategies import messages

PRODUCER = "ID:host-40123-1795306854999-1:1:1"
BODIES: dict[MessageKind, Any] = {
    MessageKind.MESSAGE: None,
    MessageKind.BYTES: b"\x00\x01raw",
    MessageKind.MAP: {"k": JInt(1), "s": "v"},
    MessageKind.OBJECT: b"\xac\xed\x00\x05",
    MessageKind.STREAM: [1, "a", b"z"],
    MessageKind.TEXT: "hello ünï",
    MessageKind.BLOB: None,
}
Key = tuple[str | None, str | None, int | None]


def _header_key(frame: bytes | None) -> Key:
    """The key as the audit read it with a second pass: ``decode(lazy=True)`` per row,
    None where the header does not decode, strings in their UTF-8 form."""
    try:
        msg = None if frame is None else decode(frame, lazy=True)
    except (DecodeError, ValueError, IndexError, OverflowError):
        return None, None, None
    if msg is None:
        return None, None, None
    strings = [
        None if s is None else replace_lone_surrogates(s) for s in (msg.container, msg.msgid_prod)
    ]
    return strings[0], strings[1], msg.msgid_seq


def _check(frames: list[bytes | None]) -> int:
    """Assert every way the decoding pass gives the key equals :func:`_header_key`, and equals
    ``decode(frame)``'s for frames that decode; returns how many frames went the slow way."""
    want = [_header_key(f) for f in frames]
    for frame, key in zip(frames, want, strict=True):
        if frame is not None and decode_msg(frame)["decode_error"] is None:
            msg = decode(frame)
            assert key == (
                None if msg.container is None else replace_lone_surrogates(msg.container),
                None if msg.msgid_prod is None else replace_lone_surrogates(msg.msgid_prod),
                msg.msgid_seq,
            ), frame
        assert decode_identity(frame) == key, frame
    declined: list[bytes] = []

    def slow(data: bytes) -> dict[str, Any]:
        declined.append(data)
        row = decode_msg(data)
        row.update(zip(IDENTITY_FIELDS, decode_identity(data), strict=True))
        return row

    for spans in (False, True):
        declined.clear()
        cols = summarize(frames, slow, text_spans=spans)
        got = list(zip(*(cols[name] for name in IDENTITY_FIELDS), strict=True))
        assert got == want
    msgs = pa.array(frames, pa.binary())
    names = [n for n, _ in DECODED_FIELDS] + [n for n, _ in IDENTITY_COLUMNS]
    for bodies in (False, True):
        table = pa.Table.from_arrays(decode_columns(msgs, bodies, identity=True), names=names)
        got = [
            (r["msg_container"], r["msg_msgid_prod"], r["msg_msgid_seq"]) for r in table.to_pylist()
        ]
        assert got == want
        # The decoded columns are those of a pass without the key.
        plain = decode_columns(msgs, bodies)
        assert [a.to_pylist() for a in table.columns[: len(plain)]] == [
            a.to_pylist() for a in plain
        ]
    assert list(zip(*(a.to_pylist() for a in identity_columns(msgs)), strict=True)) == want
    for frame, key in zip(frames, want, strict=True):  # frame by frame, as its own batch
        one = decode_columns(pa.array([frame], pa.binary()), identity=True)
        assert tuple(a[0].as_py() for a in one[-3:]) == key, frame
    return len(declined)


def _build(kind: MessageKind, **kwargs: Any) -> bytes:
    args: dict[str, Any] = {"destination": "queue://Q", "producer_id": PRODUCER, "sequence": 7}
    args.update(kwargs)
    return encode(build_message(kind, BODIES[kind], **args))


def test_every_fixture_row_gives_the_key_decode_reads() -> None:
    assert available(), "the shared ActiveMQ fixture is missing: put ../shared beside the repo"
    fixture = rows()
    frames: list[bytes | None] = [r.msg for r in fixture]
    assert _check(frames) <= 2  # only the MapMessage and StreamMessage bodies go the slow way
    # ActiveMQ wrote the row's columns from the same message.
    keys = [_header_key(r.msg) for r in fixture]
    assert keys == [(r.container, r.msgid_prod, r.msgid_seq) for r in fixture]


def test_every_kind_compressed_or_not_with_and_without_properties() -> None:
    frames: list[bytes | None] = []
    for kind in MessageKind:
        for compress in (False, True):
            for props in (None, {}, {"a": "x", "n": JInt(1), "l": JLong(2)}):
                frames.append(_build(kind, compress=compress, properties=props))
    frames.append(_build(MessageKind.TEXT, destination="topic://T.ü", sequence=2**62))
    frames.append(_build(MessageKind.TEXT, producer_id="ID:other-1-1-1:2:3", sequence=0))
    frames.append(None)
    assert _check(frames) > 0  # compressed and map/stream frames exercise the slow way


def test_unusual_destinations_and_message_ids() -> None:
    base = Message(
        kind=MessageKind.TEXT,
        content=encode_body(MessageKind.TEXT, "t", False),
        destination=Destination.queue("Q"),
        message_id=MessageId(None, ProducerId("c", 1, 2), 5, 6),
    )
    variants = [
        base.replace(destination=None),  # no destination: no container
        base.replace(message_id=None),  # no message id: no producer, no sequence
        base.replace(message_id=MessageId(None, None, 5, 6)),  # "null" as Java prints it
        base.replace(message_id=MessageId("ID:given", ProducerId(None, 1, 2), -5, 6)),
        base.replace(message_id=MessageId("no-prefix", ProducerId("c", 1, 2), 5, 6)),
        base.replace(message_id=MessageId("ID:given", None, 5, 6)),
        base.replace(destination=Destination(DestinationKind.TEMP_QUEUE, None)),
        base.replace(destination=Destination(DestinationKind.TEMP_TOPIC, "tt")),
        base.replace(destination=Destination(DestinationKind.QUEUE, "a,b")),  # composite
        base.replace(destination=Destination.queue("cut \ud83d")),  # a lone surrogate
        base.replace(message_id=MessageId(None, ProducerId("p \udc00", 1, 2), 5, 6)),
        base.replace(destination=Destination.queue("nul \x00 😀")),
        base.replace(original_destination=Destination.topic("ORIG")),
        base.replace(marshalled_properties=b"\xff\xff\xff\xff"),
    ]
    frames: list[bytes | None] = [encode(m) for m in variants]
    # The same producer's frames in a row (its head is remembered), then one of another.
    frames += [
        encode(base.replace(message_id=MessageId(None, ProducerId("c", 1, 2), s, s)))
        for s in range(5)
    ]
    frames += [encode(base.replace(destination=Destination.queue("Q2")))]
    _check(frames)


def test_malformed_frames_give_the_key_their_header_holds() -> None:
    """A frame whose properties or body do not decode is undecodable, yet its header, and the
    key in it, reads as before; a frame cut or garbled in its header has none."""
    good = _build(MessageKind.TEXT, properties={"a": "x", "n": JInt(1)}, correlation_id="c")
    bad_props = encode(
        decode(good).replace(
            marshalled_properties=b"\x00\x00\x00\x01" + encode_map({"k": "v"})[4:] + b"\x00"
        )
    )
    bad_zip = encode(decode(good).replace(compressed=True))  # a body that does not inflate
    frames: list[bytes | None] = [good[:n] for n in range(len(good))]
    for i in range(len(good)):
        for byte in (0x00, 0x01, 0x02, 0x7F, 0xC0, 0xED, 0xFF):
            frames.append(good[:i] + bytes([byte]) + good[i + 1 :])
    frames += [good + b"\x00", b"", b"\x00\x00\x00\x05\x1c\x01", bad_props, bad_zip, None]
    _check(frames)
    for frame in (bad_props, bad_zip):
        assert decode_msg(frame)["decode_error"] is not None
        assert decode_identity(frame) == ("queue://Q", PRODUCER, 7)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages(), st.data())
def test_arbitrary_messages_and_mutations(drawn: tuple[Message, Any, Any], data: Any) -> None:
    frame = encode(drawn[0])
    at = data.draw(st.integers(0, len(frame) - 1))
    flipped = frame[:at] + bytes([data.draw(st.integers(0, 255))]) + frame[at + 1 :]
    _check([frame, flipped, frame[:at]])


def test_the_key_columns_follow_the_decoded_ones_only_when_asked() -> None:
    frames: list[bytes | None] = [_build(MessageKind.TEXT), None, b"bad"]
    batch = pa.RecordBatch.from_arrays(
        [pa.array([1, 2, 3]), pa.array(frames, pa.binary())], names=["id", "msg"]
    )
    decoded = [n for n, _ in DECODED_FIELDS]
    (plain,) = decode_batches(iter([batch]), "msg", keep_msg=False)
    assert plain.schema.names == ["id", *decoded]
    (keyed,) = decode_batches(iter([batch]), "msg", keep_msg=False, identity=True)
    assert keyed.schema.names == [
        "id",
        *decoded,
        "msg_container",
        "msg_msgid_prod",
        "msg_msgid_seq",
    ]
    assert keyed.column("msg_msgid_seq").type == pa.int64()
    assert keyed.select(["msg_container", "msg_msgid_prod", "msg_msgid_seq"]).to_pylist() == [
        {"msg_container": "queue://Q", "msg_msgid_prod": PRODUCER, "msg_msgid_seq": 7},
        dict.fromkeys(("msg_container", "msg_msgid_prod", "msg_msgid_seq")),
        dict.fromkeys(("msg_container", "msg_msgid_prod", "msg_msgid_seq")),
    ]
