"""Hypothesis strategies for typed primitive values and whole messages."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from mqstore.openwire import (
    ConnectionId,
    ConsumerId,
    Destination,
    DestinationKind,
    JByte,
    JChar,
    JFloat,
    JInt,
    JLong,
    JShort,
    LocalTransactionId,
    Message,
    MessageId,
    MessageKind,
    ProducerId,
    XATransactionId,
    encode_body,
    encode_map,
)

CHARS = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=())
TEXT = st.text(alphabet=CHARS, max_size=30)
LONG = st.integers(-(2**63), 2**63 - 1)
INT = st.integers(-(2**31), 2**31 - 1)


def _normal(text: str) -> str:
    """Adjacent surrogates come back joined; keep generated strings in that form."""
    return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")


STR = TEXT.map(_normal)
SCALARS: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-128, 127).map(JByte),
    st.integers(-(2**15), 2**15 - 1).map(JShort),
    st.integers(0, 0xFFFF).map(lambda c: JChar(chr(c))),
    INT.map(JInt),
    LONG.map(JLong),
    st.floats(width=32, allow_nan=False).map(JFloat),
    st.floats(allow_nan=False),
    STR,
    st.binary(max_size=20),
)
VALUES: st.SearchStrategy[Any] = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(STR, inner, max_size=4)),
    max_leaves=12,
)
PROPERTIES = st.dictionaries(STR, VALUES, max_size=6)

DESTINATIONS = st.builds(Destination, st.sampled_from(list(DestinationKind)), st.none() | STR)
PRODUCERS = st.builds(ProducerId, st.none() | STR, LONG, LONG)
TX_IDS = st.one_of(
    st.builds(LocalTransactionId, LONG, st.none() | st.builds(ConnectionId, st.none() | STR)),
    st.builds(XATransactionId, INT, st.none() | st.binary(max_size=8), st.none() | st.binary()),
)
BROKER_IDS = st.none() | st.lists(st.none() | STR, max_size=3).map(tuple)


@st.composite
def bodies(draw: st.DrawFn, kind: MessageKind) -> Any:
    """A body value suited to ``kind``; sometimes large."""
    if kind is MessageKind.TEXT:
        return draw(st.none() | STR | st.just("big ✓ " * 5000))
    if kind is MessageKind.BYTES:
        return draw(st.binary(max_size=64) | st.just(bytes(70000)))
    if kind is MessageKind.MAP:
        return draw(PROPERTIES)
    if kind is MessageKind.STREAM:
        return draw(st.lists(SCALARS, max_size=5))
    return draw(st.none() | st.binary(max_size=32))


@st.composite
def messages(draw: st.DrawFn) -> tuple[Message, Any, dict[str, Any] | None]:
    """A message with every header field drawn, plus the body and properties it holds."""
    kind = draw(st.sampled_from(list(MessageKind)))
    body = draw(bodies(kind))
    compress = draw(st.booleans()) and kind is not MessageKind.MESSAGE
    props = draw(st.none() | PROPERTIES)
    msg = Message(
        kind=kind,
        command_id=draw(INT),
        response_required=draw(st.booleans()),
        producer_id=draw(st.none() | PRODUCERS),
        destination=draw(st.none() | DESTINATIONS),
        transaction_id=draw(st.none() | TX_IDS),
        original_destination=draw(st.none() | DESTINATIONS),
        message_id=draw(
            st.none() | st.builds(MessageId, st.none() | STR, st.none() | PRODUCERS, LONG, LONG)
        ),
        original_transaction_id=draw(st.none() | TX_IDS),
        group_id=draw(st.none() | STR),
        group_sequence=draw(INT),
        correlation_id=draw(st.none() | STR),
        persistent=draw(st.booleans()),
        expiration=draw(LONG),
        priority=draw(st.integers(-128, 127)),
        reply_to=draw(st.none() | DESTINATIONS),
        timestamp=draw(LONG),
        type=draw(st.none() | STR),
        content=encode_body(kind, body, compress),
        marshalled_properties=None if props is None else encode_map(props),
        target_consumer_id=draw(st.none() | st.builds(ConsumerId, st.none() | STR, LONG, LONG)),
        compressed=compress,
        redelivery_counter=draw(INT),
        broker_path=draw(BROKER_IDS),
        arrival=draw(LONG),
        user_id=draw(st.none() | STR),
        received_by_dfbridge=draw(st.booleans()),
        droppable=draw(st.booleans()),
        cluster=draw(BROKER_IDS),
        broker_in_time=draw(LONG),
        broker_out_time=draw(LONG),
        jms_xgroup_first_for_consumer=draw(st.booleans()),
    )
    if kind is MessageKind.BLOB:
        msg = msg.replace(
            remote_blob_url=draw(st.none() | STR),
            mime_type=draw(st.none() | STR),
            deleted_by_broker=draw(st.booleans()),
        )
    return msg, body, props
