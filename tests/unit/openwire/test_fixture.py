"""Every row written by a real ActiveMQ 5.17.2 decodes as ActiveMQ decodes it and re-encodes
to the same bytes."""

from __future__ import annotations

from typing import Any

import pytest

from mqstore.openwire import (
    DestinationKind,
    JInt,
    JLong,
    MessageKind,
    PropertyValue,
    decode,
    encode,
)

from .fixture_data import Row, available, rows

assert available(), "the shared ActiveMQ fixture is missing: put ../shared beside the repository"

_JAVA_TYPES: dict[str, type] = {
    "UTF8Buffer": str,
    "Boolean": bool,
    "Double": float,
    "Integer": JInt,
    "Long": JLong,
    "byte[]": bytes,
}


def _java_value(text: str, java_type: str) -> Any:
    """A value as ActiveMQ's dump prints it, converted to what our decoder returns."""
    if java_type == "Boolean":
        return text == "true"
    if java_type == "Double":
        return float(text)
    if java_type in ("Integer", "Long"):
        return int(text)
    if java_type == "byte[]":
        return bytes.fromhex(text.removeprefix("bytes:"))
    return text


def _check_typed(value: PropertyValue, text: str, java_type: str) -> None:
    assert type(value) is _JAVA_TYPES[java_type], (value, java_type)
    assert value == _java_value(text, java_type)


def _null(text: str) -> str | None:
    return None if text == "null" else text


def _ids() -> list[int]:
    return [r.id for r in rows()] if available() else []


def _row(row_id: int) -> Row:
    return next(r for r in rows() if r.id == row_id)


def test_fixture_has_all_17_rows() -> None:
    assert [r.id for r in rows()] == list(range(1, 18))


@pytest.mark.parametrize("row_id", _ids())
def test_round_trip_is_byte_identical(row_id: int) -> None:
    row = _row(row_id)
    assert encode(decode(row.msg)) == row.msg


@pytest.mark.parametrize("row_id", _ids())
def test_jdbc_columns(row_id: int) -> None:
    row = _row(row_id)
    msg = decode(row.msg)
    assert msg.msgid_prod == row.msgid_prod
    assert msg.msgid_seq == row.msgid_seq
    assert msg.container == row.container
    assert msg.expiration == row.expiration
    assert row.priority == 0  # prioritizedMessages is off: the column is always 0


@pytest.mark.parametrize("row_id", _ids())
def test_headers_match_activemq(row_id: int) -> None:
    row = _row(row_id)
    h = row.header
    msg = decode(row.msg)
    assert int(msg.kind) == int(h["dataStructureType"])
    assert msg.jms_message_id == h["messageId"]
    assert msg.destination is not None
    assert msg.destination.qualified_name == h["destination"]
    assert msg.persistent is (h["persistent"] == "true")
    assert msg.priority == int(h["priority"])
    assert msg.expiration == int(h["expiration"])
    assert msg.timestamp == int(h["timestamp"])
    assert msg.correlation_id == _null(h["correlationId"])
    assert msg.type == _null(h["type"])
    assert str(msg.producer_id) == h["producerId"]
    assert msg.broker_in_time == int(h["brokerInTime"])
    assert msg.compressed is (h["compressed"] == "true")
    assert msg.content == bytes.fromhex(row.lines["content_bytes(hex)"])
    raw_props = row.lines["marshalled_properties(hex)"]
    assert msg.marshalled_properties == (None if raw_props == "null" else bytes.fromhex(raw_props))


@pytest.mark.parametrize("row_id", _ids())
def test_properties_match_activemq(row_id: int) -> None:
    row = _row(row_id)
    msg = decode(row.msg)
    assert sorted(msg.properties) == sorted(name for name, _, _ in row.props)
    for name, text, java_type in row.props:
        _check_typed(msg.properties[name], text, java_type)
    assert msg.plain_properties() == {n: _java_value(t, j) for n, t, j in row.props}


@pytest.mark.parametrize("row_id", _ids())
def test_body_matches_activemq(row_id: int) -> None:
    row = _row(row_id)
    msg = decode(row.msg)
    if "body(text)" in row.lines:
        assert msg.kind is MessageKind.TEXT
        assert msg.text == row.lines["body(text)"]
    elif "body(bytes,hex)" in row.lines:
        assert msg.kind is MessageKind.BYTES
        assert msg.bytes_body == bytes.fromhex(row.lines["body(bytes,hex)"])
    elif "body(map)" in row.lines:
        assert msg.kind is MessageKind.MAP
        entries = [e.strip() for e in row.lines["body(map)"].split(";") if e.strip()]
        body = msg.map_body
        assert body is not None and len(body) == len(entries)
        for entry in entries:
            key, _, rest = entry.partition("=")
            text, _, java_type = rest.rpartition(" (")
            _check_typed(body[key], text, java_type.rstrip(")"))
    else:
        assert msg.kind is MessageKind.STREAM
        assert msg.stream_body == ["stream string", JInt(7), False]
        assert [type(v) for v in msg.stream_body] == [str, JInt, bool]
        shown = [v.strip() for v in row.lines["body(stream)"].split("|") if v.strip()]
        assert shown == ["stream string", "7", "false"]


def test_expected_md_details() -> None:
    """Spot checks from EXPECTED.md: STOMP vs OpenWire producers, ids, utf-8 body."""
    s1, s4, s5 = (decode(_row(i).msg) for i in (1, 4, 5))
    assert s1.producer_id is not None and s1.producer_id.session_id == -1
    assert s1.message_id is not None and s1.message_id.text_view is None
    assert s1.message_id.broker_sequence_id == 13
    assert s1.response_required and s1.command_id == 3
    assert s4.correlation_id == "corr-stomp-0001" and s4.type == "fixture.type.stomp"
    assert s4.expiration == 2110666859005
    assert s5.text == "utf8 text: héllo ✓"
    t1 = decode(_row(7).msg)
    assert t1.destination is not None and t1.destination.kind is DestinationKind.TOPIC
    assert t1.container == "topic://FIXTURE.T"
    j3 = decode(_row(14).msg)
    assert (j3.priority, j3.correlation_id, j3.type) == (9, "corr-ow-0001", "fixture.type.ow")
    assert j3.jms_message_id == "ID:vm-38831-1795306860829-1:1:1:1:3"
    assert dict(j3.properties) == {"bool_prop": False}
