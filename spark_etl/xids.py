"""XA rows in the audit: the in-doubt list, and XIDs that mqstore's XA recovery refuses.

A row of ``ACTIVEMQ_MSGS`` or ``ACTIVEMQ_ACKS`` with an ``XID`` is XA-prepared work, in
doubt until its transaction ends. The value is ActiveMQ's encoding (base64 of a ``+``/``-``
marker, last-ack id, priority, formatId, gtrid length, gtrid and bqual, reference §6);
mqstore's ``xa_recover`` refuses to list the prepared transactions while any row holds
another value (it may belong to any transaction). The audit reads each value as that
recovery does (both with ``mqstore.openwire.xid_column``), so it names those rows before a
transaction manager meets the refusal.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.types import StringType

from mqstore.openwire.xid_column import MALFORMED_XID_FIX, xid_column_problem

#: What to do about a row :func:`malformed_xids` lists (the store's error says the same).
MALFORMED_XID_ADVICE = (
    "mqstore's XA recovery refuses to list the prepared transactions while any row holds "
    "such an XID (a list without it could leave out a transaction, or part of one). "
    f"{MALFORMED_XID_FIX}"
)


# Called only for the rows with an XID (prepared work: few), so no Arrow batches.
_problem = sf.udf(xid_column_problem, StringType(), useArrow=False)


def _xa_rows(msgs: DataFrame, acks: DataFrame) -> DataFrame:
    """The rows of MSGS and ACKS with an ``XID``: a MSGS row named by its ``id``, an ACKS row
    by its key (``destination``, ``client_id``, ``sub_name``, ``priority``) with its
    ``last_acked_id``; the columns the other table lacks are null."""
    none = sf.lit(None)
    m = msgs.where(sf.col("xid").isNotNull()).select(
        sf.lit("msgs").alias("table"),
        sf.col("container").alias("destination"),
        sf.col("id").cast("bigint").alias("id"),
        none.cast("string").alias("client_id"),
        none.cast("string").alias("sub_name"),
        none.cast("bigint").alias("priority"),
        none.cast("bigint").alias("last_acked_id"),
        "xid",
    )
    a = acks.where(sf.col("xid").isNotNull()).select(
        sf.lit("acks").alias("table"),
        sf.col("container").alias("destination"),
        none.cast("bigint").alias("id"),
        "client_id",
        "sub_name",
        sf.col("priority").cast("bigint").alias("priority"),
        sf.col("last_acked_id").cast("bigint").alias("last_acked_id"),
        "xid",
    )
    return m.unionByName(a)


_ROW_ORDER = ("table", "destination", "id", "client_id", "sub_name", "priority")


def in_doubt(msgs: DataFrame, acks: DataFrame) -> DataFrame:
    """XA-prepared rows (``XID`` not null) of MSGS and ACKS, named as in :func:`_xa_rows`."""
    return _xa_rows(msgs, acks).orderBy(*_ROW_ORDER)


def malformed_xids(msgs: DataFrame, acks: DataFrame) -> DataFrame:
    """Rows of MSGS and ACKS whose ``XID`` is not ActiveMQ's encoding of prepared work
    (``problem`` says why, as XA recovery does). A MSGS row is named by its ``id``, an
    ACKS row by its key: ``destination`` (CONTAINER), ``client_id``, ``sub_name`` and
    ``priority``; the columns the other table lacks are null."""
    return (
        _xa_rows(msgs, acks)
        .drop("last_acked_id")
        .withColumn("problem", _problem(sf.col("xid")))
        .where(sf.col("problem").isNotNull())
        .orderBy(*_ROW_ORDER)
    )


__all__ = ["MALFORMED_XID_ADVICE", "in_doubt", "malformed_xids"]
