"""ActiveMQ's XID column text: what the store writes reads back, and each value XA recovery
cannot read is named with what is wrong with it (the Spark audit lists those rows with it)."""

from __future__ import annotations

import base64
import struct

import pytest

from mqstore.openwire.xid_column import (
    XidColumn,
    decode_xid_column,
    encode_xid_column,
    xid_column_problem,
)

#: A prepared add as ActiveMQ writes it, with '*' for its '+' marker.
_ADD = base64.b64decode(encode_xid_column("+", 0, 0, 1, b"g", b"b"))
BAD_MARKER = base64.b64encode(b"*" + _ADD[1:]).decode()


@pytest.mark.parametrize(
    "parts",
    [
        XidColumn("+", 0, 0, 1, b"g1", b"b"),
        XidColumn("-", 42, 9, 7, b"global", b""),
        XidColumn("+", 0, 0, 0, b"", b""),
        XidColumn("-", -1, -1, -2, b"\x00" * 64, b"\xff" * 64),
    ],
)
def test_a_value_the_store_writes_reads_back(parts: XidColumn) -> None:
    column = encode_xid_column(*parts)
    assert decode_xid_column(column) == parts
    assert xid_column_problem(column) is None


def test_activemq_layout_byte_for_byte() -> None:
    """Marker, last-ack (8), priority (1), formatId (4), gtrid length (2), gtrid, bqual."""
    raw = b"-" + struct.pack(">qbiH", 42, 9, 7, 2) + b"gt" + b"bq"
    assert encode_xid_column("-", 42, 9, 7, b"gt", b"bq") == base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "empty (a row outside XA has a NULL XID, not '')"),
        ("XID:1:abcd:ef", "not base64 text (standard alphabet, with padding)"),
        ("QUJDRA", "not base64 text (standard alphabet, with padding)"),  # unpadded
        ("QUJD\n", "not base64 text (standard alphabet, with padding)"),
        ("é", "not base64 text (standard alphabet, with padding)"),
        ("QUJD", "3 bytes of base64 data, fewer than the 16 of the marker"),
        (BAD_MARKER, "marker byte 0x2a, neither '+' (add) nor '-' (remove)"),
        (
            base64.b64encode(b"+" + struct.pack(">qbiH", 0, 0, 1, 300) + b"gb").decode(),
            "a gtrid length of 300 bytes, more than the 2 bytes that follow it",
        ),
    ],
)
def test_a_value_recovery_cannot_read_is_named_with_what_is_wrong(value: str, problem: str) -> None:
    assert (xid_column_problem(value) or "").startswith(problem)
    with pytest.raises(ValueError) as raised:
        decode_xid_column(value)
    assert str(raised.value).startswith(problem)


def test_null_is_a_row_outside_xa() -> None:
    assert xid_column_problem(None) is None
