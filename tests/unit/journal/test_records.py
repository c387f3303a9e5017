"""Operation encoding and record/segment framing."""

from __future__ import annotations

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from journal import (
    AckSubscription,
    AddMessage,
    AddSubscription,
    CheckpointMark,
    DeleteSubscription,
    JournalDecodeError,
    Op,
    Position,
    PurgeDestination,
    RemoveMessages,
    UpdateMessage,
    XaCommit,
    XaPrepare,
    XaRollback,
    decode_batch,
    encode_batch,
)
from journal.format import (
    FRAME_OVERHEAD,
    HEADER_SIZE,
    RECORD_BATCH,
    RECORD_CHECKPOINT,
    UnsupportedFormatError,
    decode_header,
    encode_frame,
    encode_header,
    frame_ops,
    record_type_for,
)
from journal.reader import FrameWalker

i64 = st.integers(-(2**63), 2**63 - 1)
u63 = st.integers(0, 2**63 - 1)
text = st.text(max_size=40)
opt_text = st.none() | text
blob = st.binary(max_size=300)

add_message = st.builds(
    AddMessage,
    id=i64,
    container=text,
    msgid_prod=opt_text,
    msgid_seq=st.none() | i64,
    expiration=i64,
    priority=st.integers(-128, 127),
    msg=blob,
    xid=opt_text,
)
plain_ops: st.SearchStrategy[Op] = st.one_of(
    add_message,
    st.builds(RemoveMessages, container=text, ids=st.lists(i64, max_size=20).map(tuple)),
    st.builds(UpdateMessage, container=text, id=i64, msg=blob),
    st.builds(
        AddSubscription,
        container=text,
        client_id=text,
        sub_name=text,
        selector=opt_text,
        sub_dest=opt_text,
        last_acked_id=i64,
        prioritized=st.booleans(),
    ),
    st.builds(DeleteSubscription, container=text, client_id=text, sub_name=text),
    st.builds(
        AckSubscription,
        container=text,
        client_id=text,
        sub_name=text,
        last_acked_id=i64,
        priority=st.none() | st.integers(-128, 127),
    ),
    st.builds(PurgeDestination, container=text),
)
any_op: st.SearchStrategy[Op] = st.one_of(
    plain_ops,
    st.builds(XaPrepare, xid=text, ops=st.lists(plain_ops, max_size=4).map(tuple)),
    st.builds(XaCommit, xid=text),
    st.builds(XaRollback, xid=text),
    st.builds(CheckpointMark, segment=u63, offset=u63),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(any_op, max_size=8))
def test_batch_round_trip(ops: list[Op]) -> None:
    assert decode_batch(encode_batch(ops)) == ops


@settings(max_examples=50, deadline=None)
@given(st.lists(any_op, min_size=1, max_size=4))
def test_every_truncation_is_a_decode_error(ops: list[Op]) -> None:
    payload = encode_batch(ops)
    for cut in range(len(payload)):
        with pytest.raises(JournalDecodeError):
            decode_batch(payload[:cut])
    with pytest.raises(JournalDecodeError):
        decode_batch(payload + b"\x00")


def test_unknown_tag_and_nested_transaction_are_refused() -> None:
    with pytest.raises(JournalDecodeError, match="unknown operation tag"):
        decode_batch(b"\x01\x00\x00\x00\xff")
    with pytest.raises(ValueError, match="cannot be part of an XaPrepare"):
        encode_batch([XaPrepare("x", (XaCommit("y"),))])


def test_out_of_range_fields_are_value_errors() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        encode_batch([PurgeDestination("q" * 70000)])
    with pytest.raises(ValueError, match="AddMessage"):
        encode_batch([AddMessage(2**64, "queue://a", None, None, 0, 4, b"", None)])
    with pytest.raises(ValueError, match="AddMessage"):
        encode_batch([AddMessage(1, "queue://a", None, None, 0, 400, b"", None)])
    with pytest.raises(TypeError):
        encode_batch(["not an op"])  # type: ignore[list-item]


def test_record_type_of_checkpoint_marks() -> None:
    assert record_type_for([CheckpointMark(1, 24)]) == RECORD_CHECKPOINT
    assert record_type_for([PurgeDestination("queue://a")]) == RECORD_BATCH
    with pytest.raises(ValueError, match="only operation"):
        record_type_for([CheckpointMark(1, 24), PurgeDestination("queue://a")])


def test_segment_header() -> None:
    header = encode_header(42)
    assert len(header) == HEADER_SIZE
    assert header.startswith(b"MQSJRNL\x00")
    assert decode_header(header) == 42
    bad = bytearray(header)
    bad[12] ^= 1
    with pytest.raises(ValueError, match="checksum"):
        decode_header(bytes(bad))
    with pytest.raises(ValueError, match="magic"):
        decode_header(b"X" * HEADER_SIZE)
    other_version = bytearray(header)
    other_version[8] = 9
    other_version[20:24] = crc32c(bytes(other_version[:20])).to_bytes(4, "little")
    with pytest.raises(UnsupportedFormatError):
        decode_header(bytes(other_version))


def test_frame_layout_and_walk() -> None:
    payload = encode_batch([PurgeDestination("queue://a")])
    frame = encode_frame(RECORD_BATCH, payload)
    assert len(frame) == len(payload) + FRAME_OVERHEAD
    assert int.from_bytes(frame[:4], "little") == len(payload)
    assert frame[4] == RECORD_BATCH
    data = encode_header(1) + frame + frame_ops([CheckpointMark(1, 24)])
    walker = FrameWalker(memoryview(data))
    frames = list(walker)
    assert walker.problem is None
    assert [f.record_type for f in frames] == [RECORD_BATCH, RECORD_CHECKPOINT]
    assert frames[0].start == HEADER_SIZE
    assert frames[1].end == len(data)
    assert decode_batch(frames[1].payload) == [CheckpointMark(1, 24)]


def test_position_order_and_text_form() -> None:
    a, b, c = Position(1, 500), Position(2, 24), Position(2, 100)
    assert a < b < c
    assert sorted([c, a, b]) == [a, b, c]
    assert len({a, Position(1, 500)}) == 1
    assert str(b) == "0000000000000002:24"
    assert Position.parse(str(c)) == c
    with pytest.raises(ValueError, match="SEGMENT:OFFSET"):
        Position.parse("nonsense")
