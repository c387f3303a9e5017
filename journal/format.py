"""On-disk format of journal segments and records.

Segment file ``NNNNNNNNNNNNNNNN.wal`` (16-digit zero-padded segment number)::

    header := magic b"MQSJRNL\\x00" (8) | version u16 | flags u16 | segment u64
              | crc32c u32 over the 20 bytes before it                      (24 bytes)
    record := length u32 | type u8 | payload (length bytes)
              | crc32c u32 over length, type and payload
    seal   := a padding record whose payload is magic b"MQSSEAL\\x00" (8)
              | segment u64 | end u64 | records u64                         (41 bytes)

All integers are little endian. Header flag ``FLAG_SEALS_PREVIOUS`` (1): the first record
of the segment is the *seal* of the segment before it, written with the header when the
writer moves on: the number of that segment, the offset its last record ends at (its
size) and how many records it holds (its own seal not counted). A segment cut later, even
exactly at a record boundary, is then told from an intact one. Segments without the flag
(the first of a journal, stand-ins ``repair`` creates, and every segment of earlier
builds, which write flags 0 and ignore them) seal nothing.

Record types: ``RECORD_BATCH`` (1), a batch of operations encoded by
:func:`journal.records.encode_batch`; ``RECORD_CHECKPOINT`` (2), the same encoding holding
exactly one :class:`~journal.records.CheckpointMark`; ``RECORD_PADDING`` (3), bytes that
hold nothing (``mqstore journal repair`` writes them over damaged bytes, so the records
after the damage keep their positions; a seal is one too, so builds that read padding read
sealed journals, and replay skips it). Type 0 is never written, so zero-filled space is
recognisable.

A record's payload may not exceed ``MAX_PAYLOAD`` (512 MiB). A record larger than the
segment size gets a segment of its own, which is then bigger than the nominal size.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from crc32c import crc32c

from journal.records import CheckpointMark, Op, encode_batch

__all__ = [
    "FLAG_SEALS_PREVIOUS",
    "FORMAT_VERSION",
    "FRAME_OVERHEAD",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_PAYLOAD",
    "RECORD_BATCH",
    "RECORD_CHECKPOINT",
    "RECORD_PADDING",
    "SEAL_FRAME_SIZE",
    "Position",
    "Seal",
    "UnsupportedFormatError",
    "decode_header",
    "decode_seal",
    "encode_frame",
    "encode_header",
    "encode_padding",
    "encode_seal",
    "frame_ops",
    "header_flags",
    "record_type_for",
    "segment_file_name",
]

MAGIC = b"MQSJRNL\x00"
FORMAT_VERSION = 1
RECORD_BATCH = 1
RECORD_CHECKPOINT = 2
RECORD_PADDING = 3
RECORD_TYPES = frozenset({RECORD_BATCH, RECORD_CHECKPOINT, RECORD_PADDING})
MAX_PAYLOAD = 512 * 1024 * 1024
#: Header flag: the segment's first record is the seal of the segment before it.
FLAG_SEALS_PREVIOUS = 0x1
SEAL_MAGIC = b"MQSSEAL\x00"

_HEADER_BODY = struct.Struct("<8sHHQ")
_U32 = struct.Struct("<I")
HEADER_SIZE = _HEADER_BODY.size + _U32.size
FRAME_HEAD = struct.Struct("<IB")
FRAME_CRC = _U32
FRAME_OVERHEAD = FRAME_HEAD.size + FRAME_CRC.size
_SEAL = struct.Struct("<8sQQQ")
SEAL_FRAME_SIZE = FRAME_OVERHEAD + _SEAL.size

SEGMENT_SUFFIX = ".wal"
SEGMENT_NAME_RE = re.compile(r"^(\d{16})\.wal$")


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """A place in the journal: ``offset`` bytes into segment number ``segment``.

    Positions are totally ordered by (segment, offset). ``Journal.append`` returns the *end*
    position of the record it wrote (the byte after it), which is also where the next record
    of that segment would start; ``Journal.recover(after=p)`` yields exactly the records that
    end after ``p``. ``str(p)`` / ``Position.parse`` give a stable text form for storing it
    (e.g. in the database next to a checkpoint).
    """

    segment: int
    offset: int

    def __str__(self) -> str:
        return f"{self.segment:016d}:{self.offset}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """Parse the ``str()`` form, ``"<segment>:<offset>"``."""
        segment, sep, offset = text.partition(":")
        if not sep or not segment.isdigit() or not offset.isdigit():
            raise ValueError(f"not a journal position: {text!r} (expected SEGMENT:OFFSET)")
        return cls(int(segment), int(offset))


@dataclass(frozen=True, slots=True)
class Seal:
    """What the writer knew of segment ``segment`` when it left it: the offset its last
    record ends at (the segment's size) and how many records it holds (no seal counted)."""

    segment: int
    end: int
    records: int


class UnsupportedFormatError(ValueError):
    """A segment header written by another format version."""


def segment_file_name(number: int) -> str:
    """File name of segment ``number``."""
    return f"{number:016d}{SEGMENT_SUFFIX}"


def encode_header(segment: int, flags: int = 0) -> bytes:
    """The 24-byte header of segment number ``segment``."""
    body = _HEADER_BODY.pack(MAGIC, FORMAT_VERSION, flags, segment)
    return body + _U32.pack(crc32c(body))


def header_flags(data: bytes | memoryview) -> int:
    """The flags of a header :func:`decode_header` accepts."""
    return int(_HEADER_BODY.unpack_from(data, 0)[2])


def decode_header(data: bytes | memoryview) -> int:
    """Validate a segment header and return its segment number.

    Raises ``ValueError`` with the reason when the header is not valid.
    """
    if len(data) < HEADER_SIZE:
        raise ValueError(f"segment header is {len(data)} bytes, expected {HEADER_SIZE}")
    magic, version, _flags, segment = _HEADER_BODY.unpack_from(data, 0)
    if magic != MAGIC:
        raise ValueError(f"bad segment magic {bytes(magic)!r}")
    (stored,) = _U32.unpack_from(data, _HEADER_BODY.size)
    if stored != crc32c(data[: _HEADER_BODY.size]):
        raise ValueError("segment header checksum mismatch")
    if version != FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"unsupported journal format version {version} (this build reads {FORMAT_VERSION})"
        )
    return int(segment)


def encode_frame(record_type: int, payload: bytes) -> bytes:
    """Frame ``payload`` as one record (length, type, payload, CRC32C)."""
    head = FRAME_HEAD.pack(len(payload), record_type)
    return b"".join((head, payload, FRAME_CRC.pack(crc32c(payload, crc32c(head)))))


def encode_padding(size: int) -> bytes:
    """A padding record of exactly ``size`` bytes (at least ``FRAME_OVERHEAD``)."""
    if size < FRAME_OVERHEAD:
        raise ValueError(f"a padding record needs at least {FRAME_OVERHEAD} bytes, not {size}")
    return encode_frame(RECORD_PADDING, bytes(size - FRAME_OVERHEAD))


def encode_seal(seal: Seal) -> bytes:
    """The seal record (``SEAL_FRAME_SIZE`` bytes) of ``seal``."""
    payload = _SEAL.pack(SEAL_MAGIC, seal.segment, seal.end, seal.records)
    return encode_frame(RECORD_PADDING, payload)


def decode_seal(payload: bytes | memoryview) -> Seal | None:
    """The seal a padding record's payload holds, or None (plain padding)."""
    if len(payload) != _SEAL.size:
        return None
    magic, segment, end, records = _SEAL.unpack_from(payload, 0)
    return Seal(segment, end, records) if magic == SEAL_MAGIC else None


def frame_crc(head: bytes | memoryview, payload: bytes | memoryview) -> int:
    """CRC32C of a record's length/type header followed by its payload."""
    return int(crc32c(payload, crc32c(head)))


def record_type_for(ops: Sequence[Op]) -> int:
    """Record type of a batch: checkpoint when it is exactly one CheckpointMark."""
    if any(type(op) is CheckpointMark for op in ops):
        if len(ops) != 1:
            raise ValueError("a CheckpointMark must be the only operation of its record")
        return RECORD_CHECKPOINT
    return RECORD_BATCH


def frame_ops(ops: Sequence[Op]) -> bytes:
    """Encode and frame a batch of operations as one complete record."""
    return encode_frame(record_type_for(ops), encode_batch(ops))
