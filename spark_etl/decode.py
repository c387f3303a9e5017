"""Transform: decode the ``MSG`` column (OpenWire) into columns, in Spark, on Arrow batches.

:func:`decode_msg` is the pure per-row function (testable without Spark); a row that
does not decode gets null fields and ``decode_error`` set instead of failing the job.
:func:`with_decoded` decodes Arrow record batches (``mapInArrow``: no pandas conversion)
with :func:`decode_columns`, which walks each frame once straight into column lists
(:mod:`mqstore.openwire.columnar`) and leaves only unusual frames to :func:`decode_msg`;
:func:`decode_column` is the per-row function as a column UDF. With ``identity`` the same
pass also gives the key ActiveMQ derives from ``MSG`` (:data:`IDENTITY_COLUMNS`), which the
audit compares with the row's columns (:mod:`.identity`).

Bodies: ``text`` holds a TextMessage's text; ``body`` the payload of every other kind
(:func:`payload`: a BytesMessage's bytes, the content of a map, stream, object... message
as stored, inflated when compressed), null for a TextMessage and without content;
``body_size`` is the payload's size in bytes (of a text: its UTF-8 form)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.types import LongType, StringType, StructField, StructType

from mqstore.openwire import DecodeError, Message, MessageKind, decode, replace_lone_surrogates
from mqstore.openwire.body import inflate
from mqstore.openwire.columnar import IDENTITY_FIELDS, SUMMARY_FIELDS, property_text, summarize

#: Decoded fields, in order, with their Spark SQL types.
DECODED_FIELDS: tuple[tuple[str, str], ...] = (
    ("kind", "string"),
    ("jms_message_id", "string"),
    ("timestamp", "bigint"),
    ("priority", "int"),
    ("persistent", "boolean"),
    ("correlation_id", "string"),
    ("type", "string"),
    ("redelivery_counter", "int"),
    ("original_destination", "string"),
    ("properties", "map<string,string>"),
    ("text", "string"),
    ("body", "binary"),
    ("body_size", "int"),
    ("decode_error", "string"),
)
_NAMES = [name for name, _ in DECODED_FIELDS]
assert tuple(n for n in _NAMES if n != "body") == SUMMARY_FIELDS
#: The columns ``with_decoded(..., identity=True)`` adds after :data:`DECODED_FIELDS`: the
#: destination's qualified name, the producer id and the sequence of the message id inside
#: ``MSG`` (``Message.container``, ``msgid_prod``, ``msgid_seq``; from the header alone, as
#: :func:`decode_identity` reads them), which ActiveMQ writes to ``CONTAINER``,
#: ``MSGID_PROD`` and ``MSGID_SEQ``; null where ``MSG`` is NULL or its header does not decode.
IDENTITY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("msg_container", "string"),
    ("msg_msgid_prod", "string"),
    ("msg_msgid_seq", "bigint"),
)
_NO_IDENTITY = dict.fromkeys(IDENTITY_FIELDS)
#: Kinds whose stored content is a zlib stream when the message is compressed.
_DEFLATED = frozenset((MessageKind.MAP, MessageKind.STREAM, MessageKind.OBJECT))
_KIND_NAMES = {kind: kind.name.lower() for kind in MessageKind}
_TEXT_KIND = _KIND_NAMES[MessageKind.TEXT]


def decode_msg(data: bytes | bytearray | None) -> dict[str, Any]:
    """Decode one ``MSG`` value into the :data:`DECODED_FIELDS`; a NULL ``MSG`` gives nulls
    and ``decode_error`` :data:`NULL_MSG`.

    Strings are as Spark stores them: a lone UTF-16 surrogate (legal in Java) becomes ``?``.
    """
    return _decode_row(data, identity=False)


def decode_identity(data: bytes | bytearray | None) -> tuple[str | None, str | None, int | None]:
    """``Message.container``, ``msgid_prod`` and ``msgid_seq`` of one ``MSG`` value, read from
    its header alone (``decode(lazy=True)``: a frame whose header decodes has them even when
    its properties or body do not); all None when ``MSG`` is NULL or its header does not
    decode. Strings in their UTF-8 form (a lone surrogate as ``?``)."""
    if data is None:
        return None, None, None
    try:
        msg = decode(data, lazy=True)
    except (DecodeError, ValueError, IndexError, OverflowError):
        return None, None, None
    return _identity_of(msg)


def _identity_of(msg: Message) -> tuple[str | None, str | None, int | None]:
    container, producer = utf8_strings((msg.container, msg.msgid_prod))
    return container, producer, msg.msgid_seq


def _decode_identified(data: bytes) -> dict[str, Any]:
    """:func:`decode_msg`'s row plus :data:`~mqstore.openwire.columnar.IDENTITY_FIELDS`, as
    :func:`decode_identity` gives them (``summarize``'s slow path)."""
    return _decode_row(data, identity=True)


def _decode_unidentified(data: bytes) -> dict[str, Any]:
    """:func:`decode_msg`'s row with null identity fields, for passes that do not read them."""
    row = _decode_row(data, identity=False)
    row.update(_NO_IDENTITY)
    return row


def _decode_row(data: bytes | bytearray | None, identity: bool) -> dict[str, Any]:
    """:func:`decode_msg`'s row, plus the identity fields with ``identity``."""
    row: dict[str, Any] = dict.fromkeys(_NAMES)
    if data is None:
        row["decode_error"] = NULL_MSG
        if identity:
            row.update(_NO_IDENTITY)
        return row
    msg: Message | None = None
    try:
        msg = decode(data)
        row["kind"] = _KIND_NAMES[msg.kind]
        row["jms_message_id"] = msg.jms_message_id
        row["timestamp"] = msg.timestamp
        row["priority"] = msg.priority
        row["persistent"] = msg.persistent
        row["correlation_id"] = msg.correlation_id
        row["type"] = msg.type
        row["redelivery_counter"] = msg.redelivery_counter
        orig = msg.original_destination
        row["original_destination"] = None if orig is None else orig.qualified_name
        row["properties"] = {k: property_text(v) for k, v in msg.properties.items()}
        if msg.kind is MessageKind.TEXT:
            row["text"] = msg.text
        else:
            row["body"] = payload(msg)
            row["body_size"] = len(row["body"] or b"")
    except (DecodeError, ValueError, IndexError, OverflowError) as exc:
        row = dict.fromkeys(_NAMES)
        row["decode_error"] = (
            f"{type(exc).__name__}: {exc}" if not isinstance(exc, DecodeError) else str(exc)
        )
        if identity:  # the header may decode where the whole frame does not
            found = decode_identity(data) if msg is None else _identity_of(msg)
            row.update(zip(IDENTITY_FIELDS, found, strict=True))
        return row
    row = _utf8_row(row)
    if row["kind"] == _TEXT_KIND:
        text = row["text"]
        row["body_size"] = 0 if text is None else len(text.encode("utf-8"))
    if identity:
        row.update(zip(IDENTITY_FIELDS, _identity_of(msg), strict=True))
    return row


def payload(msg: Message) -> bytes | None:
    """The body of a message that is not a TextMessage, as bytes: a BytesMessage's bytes,
    else the content as stored (a map's or a stream's OpenWire encoding, a serialized
    object...), inflated when compressed; None when the message stores no content.
    Raises ``DecodeError`` for a compressed body that does not inflate."""
    if msg.content is None:
        return None
    if msg.kind is MessageKind.BYTES:
        return msg.bytes_body
    if msg.compressed and msg.kind in _DEFLATED:
        return inflate(msg.content, msg.max_decompressed)
    return msg.content


def decoded_type() -> StructType:
    """The Spark type of a decoded ``MSG``."""
    parsed = StructType.fromDDL(", ".join(f"{n} {t}" for n, t in DECODED_FIELDS))
    assert isinstance(parsed, StructType)
    return parsed


def decode_column(msg: Column | str) -> Column:
    """A struct column of the decoded fields, computed by an Arrow-batched Python UDF."""
    fn = sf.udf(decode_msg, returnType=decoded_type(), useArrow=True)
    return fn(msg)


def _utf8_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with every string given a UTF-8 form (see :func:`utf8_strings`)."""
    for name, value in row.items():
        if type(value) is str and not value.isascii():
            row[name] = replace_lone_surrogates(value)
    props = row["properties"]
    if props and not all(k.isascii() and (v is None or v.isascii()) for k, v in props.items()):
        row["properties"] = dict(
            zip(utf8_strings(props), utf8_strings(props.values()), strict=True)
        )
    return row


def utf8_strings(values: Iterable[str | None]) -> list[str | None]:
    """``values`` with each unpaired UTF-16 surrogate (legal in a Java String, e.g. a text
    cut inside an emoji) as ``?``, as Java's UTF-8 encoder writes it: Arrow and Spark
    strings must be UTF-8."""
    return [None if v is None else replace_lone_surrogates(v) for v in values]


_ARROW_TYPES = {
    "string": pa.string(),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "boolean": pa.bool_(),
    "map<string,string>": pa.map_(pa.string(), pa.string()),
    "binary": pa.binary(),
}
#: ``decode_error`` of a row whose ``MSG`` is NULL.
NULL_MSG = "MSG is NULL"


def decode_columns(msgs: pa.Array, bodies: bool = True, identity: bool = False) -> list[pa.Array]:
    """The decoded fields of a binary array of ``MSG`` values, in :data:`DECODED_FIELDS` order
    (``body`` all null unless ``bodies``: ``body_size`` is filled either way), followed by
    the :data:`IDENTITY_COLUMNS` with ``identity`` (from the same pass).

    One pass per frame straight into column lists (:mod:`mqstore.openwire.columnar`);
    frames its fast path declines go through :func:`decode_msg`, so the values are the
    same either way (strings in their UTF-8 form: a lone surrogate as ``?``). Text bodies
    are copied from ``msgs`` into the string column by Arrow, never made into Python
    strings, when they are valid UTF-8.
    """
    if msgs.type != pa.binary():
        msgs = msgs.cast(pa.binary())
    frames = msgs.to_pylist()
    slow = _decode_identified if identity else _decode_unidentified
    cols = summarize(frames, slow, text_spans=True)
    text = _span_text(msgs, cols)
    if text is None:  # a body that is not plain UTF-8: decode them all in Python
        cols = summarize(frames, slow)
        text = pa.array(cols["text"], type=pa.string())
    _fill_bodies(frames, cols, text, bodies)
    arrays = []
    for name, ddl in DECODED_FIELDS:
        if name == "properties":
            arrays.append(
                pa.MapArray.from_arrays(
                    pa.array(cols["prop_offsets"], type=pa.int32()),
                    pa.array(cols["prop_keys"], type=pa.string()),
                    pa.array(cols["prop_values"], type=pa.string()),
                    mask=pa.array(cols["prop_null"], type=pa.bool_()),
                )
            )
        elif name == "text":
            arrays.append(text)
        else:
            arrays.append(pa.array(cols[name], type=_ARROW_TYPES[ddl]))
    if identity:
        for field, (_, ddl) in zip(IDENTITY_FIELDS, IDENTITY_COLUMNS, strict=True):
            arrays.append(pa.array(cols[field], type=_ARROW_TYPES[ddl]))
    return arrays


def _fill_bodies(
    frames: list[bytes | None], cols: dict[str, list[Any]], text: pa.Array, bodies: bool
) -> None:
    """Set ``cols["body"]`` and make ``cols["body_size"]`` the payload's size, as
    :func:`decode_msg` gives them: the summary's size of a text counts its stored length
    prefix, and it holds no body. Its size of any other kind is already the payload's (it
    declines compressed frames)."""
    utf8 = pc.binary_length(text.cast(pa.binary())).to_pylist()
    kinds, sizes, errors = cols["kind"], cols["body_size"], cols["decode_error"]
    body_at, body_len = cols["body_at"], cols["body_len"]
    found: list[bytes | None] = [None] * len(frames)
    for i, kind in enumerate(kinds):
        if errors[i] is not None or kind is None:
            continue
        if kind == _TEXT_KIND:
            sizes[i] = utf8[i] or 0
        elif bodies and body_at[i] != -1:
            frame = frames[i]
            assert frame is not None
            at = body_at[i]
            if at >= 0:  # where the fast path found it (an uncompressed plain body)
                found[i] = bytes(frame[at : at + body_len[i]])
            else:
                found[i] = payload(decode(frame, lazy=True))
    for i, frame in enumerate(frames):  # a NULL MSG is undecodable too
        if frame is None:
            errors[i] = NULL_MSG
    cols["body"] = found


def _span_text(msgs: pa.Array, cols: dict[str, list[Any]]) -> pa.Array | None:
    """The text column from the ``text_at``/``text_len`` spans into ``msgs`` (plus the
    texts the slow path decoded); None unless every span is valid UTF-8 (which text
    bodies, decoded leniently, read as UTF-8 does)."""
    n = len(msgs)
    offsets = pa.Int32Array.from_buffers(
        pa.int32(), n, [None, msgs.buffers()[1]], offset=msgs.offset
    )
    at = pa.array(cols["text_at"], type=pa.int32())
    lengths = cols["text_len"]
    valid = pc.greater_equal(at, 0)
    data = msgs.buffers()[2]
    frames = memoryview(b"" if data is None else data)
    starts = pc.add(offsets, at).to_pylist()  # lengths are 0 where there is no span
    spans = [frames[a : a + k] for a, k in zip(starts, lengths, strict=True)]
    joined = pa.py_buffer(b"".join(spans))
    ends = pa.array(itertools.accumulate(lengths, initial=0), type=pa.int32())
    text = pa.StringArray.from_buffers(n, ends.buffers()[1], joined, valid.buffers()[1])
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        return None
    decoded = cols["text"]
    if decoded.count(None) == n:
        return text
    return pc.if_else(valid, text, pa.array(decoded, type=pa.string()))


def decode_batches(
    batches: Iterator[pa.RecordBatch],
    msg_col: str,
    keep_msg: bool,
    bodies: bool = True,
    identity: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Append the decoded fields to each batch (and drop ``msg_col`` unless ``keep_msg``;
    ``body`` stays null unless ``bodies``; the :data:`IDENTITY_COLUMNS` follow with
    ``identity``)."""
    names = _NAMES + [name for name, _ in IDENTITY_COLUMNS] if identity else _NAMES
    for batch in batches:
        decoded = decode_columns(batch.column(msg_col), bodies, identity)
        kept = [f.name for f in batch.schema if keep_msg or f.name != msg_col]
        yield pa.RecordBatch.from_arrays(
            [batch.column(n) for n in kept] + decoded, names=kept + names
        )


def identity_type() -> StructType:
    """The Spark type of the :data:`IDENTITY_COLUMNS` (built without a Spark session)."""
    types = {"string": StringType(), "bigint": LongType()}
    return StructType([StructField(n, types[t]) for n, t in IDENTITY_COLUMNS])


def with_decoded(
    df: DataFrame,
    msg_col: str = "msg",
    keep_msg: bool = True,
    bodies: bool = True,
    identity: bool = False,
) -> DataFrame:
    """``df`` plus the decoded fields as top-level columns (pure transform); without
    ``bodies`` the ``body`` column is null (not extracted), for jobs that read no body;
    with ``identity`` the :data:`IDENTITY_COLUMNS` follow, read in the same pass.

    The table's own ``priority`` column (0 unless ``prioritizedMessages``) is kept as
    ``store_priority``; ``priority`` is then the JMS priority from inside ``MSG``.
    """
    if "priority" in df.columns:
        df = df.withColumnRenamed("priority", "store_priority")
    kept = [f for f in df.schema.fields if keep_msg or f.name != msg_col]
    added = [*decoded_type().fields, *(identity_type().fields if identity else ())]
    schema = StructType([*kept, *added])

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return decode_batches(batches, msg_col, keep_msg, bodies, identity)

    return df.mapInArrow(run, schema)


__all__ = [
    "DECODED_FIELDS",
    "IDENTITY_COLUMNS",
    "NULL_MSG",
    "decode_batches",
    "decode_column",
    "decode_columns",
    "decode_identity",
    "decode_msg",
    "decoded_type",
    "identity_type",
    "payload",
    "property_text",
    "utf8_strings",
    "with_decoded",
]
