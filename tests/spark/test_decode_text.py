"""Text from rows ActiveMQ wrote, through the Spark decode: STOMP-stored UTF-8 bodies, lone
UTF-16 surrogates (legal in Java, not in Arrow/Spark strings), Java's number printing."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from spark_etl.decode import DECODED_FIELDS, decode_column, decode_columns, decode_msg, with_decoded
from tests.unit.openwire import activemq_quirks_data as amq

FRAMES = {
    "STOMP_EMOJI": amq.STOMP_EMOJI,
    "STOMP_TEXT_WITH_NUL": amq.STOMP_TEXT_WITH_NUL,
    "STOMP_BYTES_BRIDGE_COMPRESSED": amq.STOMP_BYTES_BRIDGE_COMPRESSED,
    "TEXT_LONE": amq.TEXT_LONE,
    "ALLPROPS": amq.ALLPROPS,
    "BLOB": amq.BLOB,
}
TEXT = {
    "STOMP_EMOJI": "hi \U0001f600 there",
    "STOMP_TEXT_WITH_NUL": "a\x00b",
    "STOMP_BYTES_BRIDGE_COMPRESSED": None,
    "TEXT_LONE": "p?q",  # "p\ud800q" as Java's UTF-8 encoder writes it
    "ALLPROPS": "props",
    "BLOB": None,
}


def _rows(arrays: list[pa.Array]) -> list[dict[str, Any]]:
    table = pa.Table.from_arrays(arrays, names=[n for n, _ in DECODED_FIELDS])
    return table.to_pylist()


def test_activemq_rows_decode_in_one_batch() -> None:
    rows = _rows(decode_columns(pa.array(list(FRAMES.values()), pa.binary())))
    assert [r["decode_error"] for r in rows] == [None] * len(FRAMES)
    assert [r["text"] for r in rows] == list(TEXT.values())
    props = dict(rows[list(FRAMES).index("ALLPROPS")]["properties"])
    assert props["strLone"] == "p?q" and props["strLoneLow"] == "p?q"
    assert props["strNonBmp"] == "a\U0001f600b"
    for name, java in amq.ALLPROPS_JAVA_TEXT.items():
        assert props[name] == java, name
    # the per-row function gives the same, row by row
    for frame, row in zip(FRAMES.values(), rows, strict=True):
        want = decode_msg(frame)
        props_of = row["properties"]
        got = dict(row, properties=None if props_of is None else dict(props_of))
        assert got == want


def test_a_spark_job_over_activemq_rows_completes(spark: Any) -> None:
    schema = StructType([StructField("id", LongType()), StructField("msg", BinaryType())])
    df = spark.createDataFrame(list(enumerate(FRAMES.values())), schema)
    got = with_decoded(df, keep_msg=False).orderBy("id").collect()
    assert [r["text"] for r in got] == list(TEXT.values())
    assert [r["decode_error"] for r in got] == [None] * len(FRAMES)
    per_row = df.select("id", decode_column("msg").alias("d")).orderBy("id").collect()
    assert [r["d"]["text"] for r in per_row] == list(TEXT.values())
    assert per_row[list(FRAMES).index("ALLPROPS")]["d"]["properties"]["float"] == "1.1"
