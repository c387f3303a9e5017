"""Transform: the key a row's ``MSG`` holds, as ActiveMQ derives its columns from it.

ActiveMQ's JDBC adapter writes ``CONTAINER`` (the destination's qualified name),
``MSGID_PROD`` (the producer id) and ``MSGID_SEQ`` (the producer's sequence number) from
the message it stores, and finds a row again by them (removal, duplicate detection).
The decoding pass reads them back from ``MSG`` (``with_decoded(..., identity=True)``, in the
same walk over each frame as the decoded columns) as ``msg_container``, ``msg_msgid_prod``
and ``msg_msgid_seq``: the values of the header alone (``decode(lazy=True)``), null where
``MSG`` is NULL or its header does not decode (the audit counts those as undecodable).
:func:`container_mismatches` and :func:`msgid_mismatches` are the audit's findings of rows
whose columns differ. :func:`with_identity` adds only those three columns (a decoding pass
of its own: a job that decodes ``MSG`` anyway asks ``with_decoded`` for them instead).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.types import StructType

from .decode import decode_columns, identity_type

#: The columns :func:`with_identity` (and ``with_decoded(..., identity=True)``) add, with
#: their Spark types.
IDENTITY_FIELDS = tuple(identity_type().fields)


def identity_columns(msgs: pa.Array) -> list[pa.Array]:
    """``msg_container``, ``msg_msgid_prod`` and ``msg_msgid_seq`` of each ``MSG`` value."""
    return decode_columns(msgs, bodies=False, identity=True)[-len(IDENTITY_FIELDS) :]


def with_identity(df: DataFrame, msg_col: str = "msg") -> DataFrame:
    """``df`` plus :data:`IDENTITY_FIELDS` read from ``msg_col`` (pure transform)."""
    schema = StructType([*df.schema.fields, *IDENTITY_FIELDS])
    names = [f.name for f in IDENTITY_FIELDS]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            added = identity_columns(batch.column(msg_col))
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, *added], names=[*batch.schema.names, *names]
            )

    return df.mapInArrow(run, schema)


def container_mismatches(msgs: DataFrame) -> DataFrame:
    """Decodable rows whose ``CONTAINER`` is not the destination inside ``MSG``
    (``msg_container``, :mod:`.identity`): the broker serves the row under the column's
    destination, a client that reads the message sees the other."""
    differs = sf.col("decode_error").isNull() & ~sf.col("container").eqNullSafe(
        sf.col("msg_container")
    )
    return msgs.where(differs).select(
        "id", sf.col("container").alias("destination"), "msg_container"
    )


def msgid_mismatches(msgs: DataFrame) -> DataFrame:
    """Decodable rows whose ``MSGID_PROD``/``MSGID_SEQ`` are not the message id inside ``MSG``
    (:mod:`.identity`); ActiveMQ finds a row by them (to remove it, or to detect a duplicate),
    so such a row may never be removed."""
    same = sf.col("msgid_prod").eqNullSafe(sf.col("msg_msgid_prod")) & sf.col(
        "msgid_seq"
    ).eqNullSafe(sf.col("msg_msgid_seq"))
    return msgs.where(sf.col("decode_error").isNull() & ~same).select(
        "id",
        sf.col("container").alias("destination"),
        "msgid_prod",
        "msgid_seq",
        "msg_msgid_prod",
        "msg_msgid_seq",
    )


__all__ = [
    "IDENTITY_FIELDS",
    "container_mismatches",
    "identity_columns",
    "msgid_mismatches",
    "with_identity",
]
