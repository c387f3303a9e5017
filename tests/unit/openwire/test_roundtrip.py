"""Property tests: arbitrary messages and primitive values survive encode -> decode -> encode."""

from __future__ import annotations

import math
import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.openwire import (
    JBigString,
    JFloat,
    JString,
    Message,
    MessageKind,
    decode,
    decode_map,
    encode,
    encode_map,
    to_plain,
)

from .strategies import PROPERTIES, VALUES, messages


def _same_types(a: Any, b: Any) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same_types(a[k], b[k])
    elif isinstance(a, list):
        for x, y in zip(a, b, strict=True):
            _same_types(x, y)


def _expected_body(kind: MessageKind, body: Any) -> Any:
    if kind is MessageKind.BYTES:
        return body or b""
    if kind is MessageKind.MAP:
        return body or {}
    if kind is MessageKind.STREAM:
        return body or []
    return body


@settings(max_examples=150, deadline=None)
@given(messages())
def test_message_round_trip(case: tuple[Message, Any, dict[str, Any] | None]) -> None:
    msg, body, props = case
    frame = encode(msg)
    back = decode(frame)
    assert back == msg
    assert encode(back) == frame
    assert back.body == _expected_body(msg.kind, body)
    if msg.kind in (MessageKind.MAP, MessageKind.STREAM) and body:
        _same_types(back.body, body)
    assert dict(back.properties) == (props or {})
    _same_types(dict(back.properties), props or {})


@given(PROPERTIES)
def test_primitive_map_round_trip(props: dict[str, Any]) -> None:
    raw = encode_map(props)
    back = decode_map(raw)
    assert back == props
    _same_types(back, props)
    assert encode_map(back) == raw


@given(VALUES)
def test_to_plain_drops_wrappers(value: Any) -> None:
    plain = to_plain(value)
    assert plain == value
    for leaf in _leaves(plain):
        assert type(leaf) in (type(None), bool, int, float, str, bytes)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


@given(st.integers(0, 2**32 - 1))
def test_float_bits_survive_including_nan_payloads(bits: int) -> None:
    raw = b"\x00\x00\x00\x01\x00\x01k\x08" + struct.pack(">I", bits)
    value = (decode_map(raw) or {})["k"]
    assert type(value) is JFloat
    assert encode_map({"k": value}) == raw


@given(st.integers(0, 2**64 - 1))
def test_double_bits_survive(bits: int) -> None:
    raw = b"\x00\x00\x00\x01\x00\x01k\x07" + struct.pack(">Q", bits)
    value = (decode_map(raw) or {})["k"]
    assert encode_map({"k": value}) == raw
    assert isinstance(value, float)
    assert math.isnan(value) or value == struct.unpack(">d", raw[-8:])[0]


def test_string_tag_follows_marshal_string_rule() -> None:
    short, long_ = "a" * 8190, "a" * 8191
    assert encode_map({"s": short})[7] == 9
    assert encode_map({"s": long_})[7] == 13
    assert decode_map(encode_map({"s": long_})) == {"s": long_}
    # Supplementary characters count as two UTF-16 units, as in Java.
    assert encode_map({"s": "\U0001f600" * 4096})[7] == 13
    # Off-rule tags read from foreign writers are kept so re-encoding stays exact.
    forced_big = b"\x00\x00\x00\x01\x00\x01s\x0d\x00\x00\x00\x02hi"
    value = (decode_map(forced_big) or {})["s"]
    assert type(value) is JBigString and encode_map({"s": value}) == forced_big
    forced_short = encode_map({"s": JString(long_)})
    assert forced_short[7] == 9 and decode_map(forced_short) == {"s": long_}
