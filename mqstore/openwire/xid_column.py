"""ActiveMQ's text in the ``XID`` column of an XA-prepared row (its JDBC store, reference §6).

Base64 (standard alphabet, with padding) of: a ``+`` (add) or ``-`` (remove) marker, the
last-ack ID (8 bytes) and priority (1 byte) of a durable ack, then OpenWire's encoded XID:
formatId (4 bytes), gtrid length (2), gtrid, bqual. Pure: the store writes and recovers
these values, the Spark audit names the ones recovery refuses.
"""

from __future__ import annotations

import base64
import struct
from typing import NamedTuple

#: The fixed bytes before the gtrid: marker, last-ack, priority, formatId, gtrid length.
XID_COLUMN_HEADER = 16
#: Where OpenWire's encoded XID starts, after the marker, last-ack and priority.
ENCODED_XID_START = 10

#: What to do about a row whose value :func:`decode_xid_column` refuses (the store's XA
#: recovery and the Spark audit both say it).
MALFORMED_XID_FIX = (
    "Inspect each row: if it is not prepared XA work, set its XID to NULL (ActiveMQ writes "
    "NULL for a row outside XA), or delete the row"
)


class XidColumn(NamedTuple):
    """The parts of one ``XID`` column value."""

    marker: str
    last_ack: int
    priority: int
    format_id: int
    gtrid: bytes
    bqual: bytes


def encoded_xid(format_id: int, gtrid: bytes, bqual: bytes) -> bytes:
    """OpenWire's encoded XID: the bytes after the marker, last-ack and priority, the same
    in every row of one transaction."""
    return struct.pack(">iH", format_id, len(gtrid)) + gtrid + bqual


def encode_xid_column(
    marker: str, last_ack: int, priority: int, format_id: int, gtrid: bytes, bqual: bytes
) -> str:
    """The column text of one prepared row."""
    raw = marker.encode("ascii") + struct.pack(">qb", last_ack, priority)
    return base64.b64encode(raw + encoded_xid(format_id, gtrid, bqual)).decode("ascii")


def decode_xid_column(column: str) -> XidColumn:
    """The parts of a column value; ValueError saying what is wrong with one that is not
    in this layout."""
    if not column:
        raise ValueError("empty (a row outside XA has a NULL XID, not '')")
    try:
        raw = base64.b64decode(column, validate=True)
    except ValueError:
        raise ValueError("not base64 text (standard alphabet, with padding)") from None
    if len(raw) < XID_COLUMN_HEADER:
        raise ValueError(
            f"{len(raw)} bytes of base64 data, fewer than the {XID_COLUMN_HEADER} of the "
            "marker, last-ack, priority, formatId and gtrid length"
        )
    if raw[0] not in b"+-":
        raise ValueError(f"marker byte 0x{raw[0]:02x}, neither '+' (add) nor '-' (remove)")
    last_ack, priority, format_id, glen = struct.unpack_from(">qbiH", raw, 1)
    end = XID_COLUMN_HEADER + glen
    if end > len(raw):
        raise ValueError(
            f"a gtrid length of {glen} bytes, more than the "
            f"{len(raw) - XID_COLUMN_HEADER} bytes that follow it"
        )
    gtrid, bqual = raw[XID_COLUMN_HEADER:end], raw[end:]
    return XidColumn(chr(raw[0]), last_ack, priority, format_id, gtrid, bqual)


def xid_column_problem(column: str | None) -> str | None:
    """What is wrong with a column value, as :func:`decode_xid_column` says it; None for a
    prepared row's value and for NULL (a row outside XA)."""
    if column is None:
        return None
    try:
        decode_xid_column(column)
    except ValueError as exc:
        return str(exc)
    return None
