"""Destinations whose partition directory name would pass the file-system limit (255 bytes)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from sqlalchemy.engine import Engine

from spark_etl.audit import audit
from spark_etl.export import (
    FORMAT_VERSION,
    current_messages,
    destination_column,
    export,
    load_watermarks,
    read_dataset,
)
from spark_etl.layout import MAX_DIR_BYTES, MAX_VALUE_BYTES, escaped_size, partition_value
from tests.spark.conftest import dsn_of, execute
from tests.spark.test_export import _add, _remove

SHORT = "queue://orders"
LONG_A = "queue://" + "orders." * 34 + "aaaa"  # 250 characters, the column's maximum
LONG_B = LONG_A[:-4] + "bbbb"  # the same first 246 characters
LONG_CJK = "queue://" + "订单队列" * 20  # 88 characters, 254 bytes once escaped
#: Names on either side of the limit (``queue://`` escapes to 14 bytes).
BOUNDARY = [
    "queue://" + "a" * (MAX_VALUE_BYTES - 14),
    "queue://" + "a" * (MAX_VALUE_BYTES - 13),
    "queue://" + "a" * (MAX_VALUE_BYTES - 17) + "=",
    "queue://" + "a" * (MAX_VALUE_BYTES - 16) + "=",
    "queue://" + "中" * ((MAX_VALUE_BYTES - 14) // 3),
    "queue://" + "中" * ((MAX_VALUE_BYTES - 14) // 3 + 1),
    "topic://" + "😀" * 60,
    "queue://" + "%" * 242,
]
ORDINARY = [SHORT, "topic://FIXTURE.T", "queue://a b=c?d#e", "queue://订单", "queue://é"]


# -- the pure function -------------------------------------------------------------------


def test_escaped_size_counts_utf8_bytes_and_spark_escapes() -> None:
    assert escaped_size("queue://A") == len("queue%3A%2F%2FA")
    assert escaped_size("é中😀") == 2 + 3 + 4
    assert escaped_size("a\nb{}") == 1 + 3 + 1 + 3 + 1


@pytest.mark.parametrize("name", ORDINARY + BOUNDARY[::2][:3])
def test_names_that_fit_are_their_own_partition_value(name: str) -> None:
    assert partition_value(name) == name


@pytest.mark.parametrize("name", [LONG_A, LONG_CJK, *BOUNDARY[1::2], BOUNDARY[-1]])
def test_long_names_become_a_prefix_and_a_hash_that_fit(name: str) -> None:
    value = partition_value(name)
    assert value is not None
    prefix, _, digest = value.rpartition("~")
    assert digest == hashlib.sha256(name.encode()).hexdigest()[:16]
    assert name.startswith(prefix) and prefix
    assert escaped_size(value) <= MAX_VALUE_BYTES
    longer = name[: len(prefix) + 1] + "~" + digest
    assert escaped_size(longer) > MAX_VALUE_BYTES  # the longest prefix that fits
    assert len(f"destination={value}".encode()) <= MAX_DIR_BYTES < 255


def test_long_names_sharing_a_prefix_get_distinct_values() -> None:
    a, b = partition_value(LONG_A), partition_value(LONG_B)
    assert a is not None and b is not None
    assert a != b and a.rpartition("~")[0] == b.rpartition("~")[0]


# -- the same in Spark ---------------------------------------------------------------------


def test_escaped_size_matches_the_directories_spark_writes(spark: Any, tmp_path: Path) -> None:
    values = ["v" + "".join(map(chr, range(1, 64))), "v" + "".join(map(chr, range(64, 128)))]
    values.append("vé中😀")
    df = spark.createDataFrame([(v, 1) for v in values], "v string, n int")
    df.write.partitionBy("v").parquet(str(tmp_path / "t"))
    written = {unquote(d.name[2:]): len(d.name.encode()) - 2 for d in (tmp_path / "t").glob("v=*")}
    assert sorted(written) == sorted(values)
    windows_only = {v: sum(v.count(ch) for ch in " <>|") for v in values}  # escaped there only
    assert {v: escaped_size(v) - written[v] for v in values} == {
        v: 2 * n for v, n in windows_only.items()
    }


def test_destination_column_agrees_with_partition_value(spark: Any) -> None:
    names = [*ORDINARY, *BOUNDARY, LONG_A, LONG_B, LONG_CJK, None]
    df = spark.createDataFrame([(n,) for n in names], "container string")
    got = df.select("container", destination_column(df["container"]).alias("d")).collect()
    assert [(r["container"], r["d"]) for r in got] == [(n, partition_value(n)) for n in names]


# -- export ----------------------------------------------------------------------------------


def _pairs(df: Any, *cols: str) -> set[tuple[Any, ...]]:
    return {tuple(r[c] for c in cols) for r in df.collect()}


def test_long_destinations_are_exported_under_their_full_names(
    spark: Any, engine: Engine, tmp_path: Path
) -> None:
    names = [SHORT, LONG_A, LONG_B, LONG_CJK]
    for row_id, name in enumerate(names, 1):
        _add(engine, row_id, row_id, name)
    dsn = dsn_of(engine)
    first = export(spark, dsn, tmp_path)
    assert first.messages == dict.fromkeys(names, 1)
    _remove(engine, 2)
    _remove(engine, 4)
    second = export(spark, dsn, tmp_path)
    assert second.message_rows == 0
    assert second.history == {LONG_A: 1, LONG_CJK: 1}
    third = export(spark, dsn, tmp_path)
    assert third.message_rows == 0 and third.history_rows == 0

    msgs = read_dataset(spark, tmp_path / "messages")
    assert msgs.count() == 4
    assert _pairs(msgs, "id", "container", "destination") == {
        (i, n, partition_value(n)) for i, n in enumerate(names, 1)
    }
    hist = read_dataset(spark, tmp_path / "history")
    assert _pairs(hist, "id", "container") == {(2, LONG_A), (4, LONG_CJK)}
    assert _pairs(current_messages(spark, tmp_path), "container") == {(SHORT,), (LONG_B,)}
    dirs = {d.name for d in (tmp_path / "messages").iterdir()}
    assert len(dirs) == 4 and "destination=queue%3A%2F%2Forders" in dirs
    assert max(len(d.encode()) for d in dirs) <= MAX_DIR_BYTES


def _downgrade_to_format_1(spark: Any, out: Path) -> None:
    """Rewrite an archive as format 1 wrote it: no ``container`` column, ``format: 1``."""
    for dataset in ("messages", "history"):
        old = out / f"{dataset}.v1"
        rows = spark.read.parquet(str(out / dataset)).drop("container")
        rows.write.partitionBy("destination", "date").parquet(str(old))
        shutil.rmtree(out / dataset)
        os.replace(old, out / dataset)
    marks = load_watermarks(out)
    (out / "_watermarks.json").write_text(json.dumps({**marks, "format": 1}))


def test_an_archive_of_format_1_is_extended_and_read_back(
    spark: Any, activemq_engine: Engine, tmp_path: Path
) -> None:
    q, t = "queue://FIXTURE.Q", "topic://FIXTURE.T"
    dsn = dsn_of(activemq_engine)
    export(spark, dsn, tmp_path)
    execute(activemq_engine, "DELETE FROM activemq_msgs WHERE id = 1")
    assert export(spark, dsn, tmp_path, now_ms=1795400000000).history == {q: 1}
    _downgrade_to_format_1(spark, tmp_path)
    assert "container" not in spark.read.parquet(str(tmp_path / "messages")).columns
    assert read_dataset(spark, tmp_path / "messages").where("container IS NULL").count() == 0

    _add(activemq_engine, 18, 18, LONG_CJK)
    execute(activemq_engine, "DELETE FROM activemq_msgs WHERE id = 7")
    result = export(spark, dsn, tmp_path, now_ms=1795400000000)
    assert result.messages == {LONG_CJK: 1}
    assert result.history == {t: 1}
    assert load_watermarks(tmp_path)["format"] == FORMAT_VERSION
    again = export(spark, dsn, tmp_path)
    assert again.message_rows == 0 and again.history_rows == 0

    msgs = read_dataset(spark, tmp_path / "messages")
    assert msgs.count() == 18
    by_id = dict(_pairs(msgs, "id", "container"))
    assert by_id[1] == q and by_id[7] == t and by_id[18] == LONG_CJK
    hist = read_dataset(spark, tmp_path / "history")
    assert _pairs(hist, "id", "container") == {(1, q), (7, t)}
    current = current_messages(spark, tmp_path)
    assert dict(_pairs(current, "container", "id")).keys() == {q, t, LONG_CJK}
    assert current.count() == 16
    report = audit(spark, dsn, tmp_path / "audit", archive=tmp_path, now_ms=1795400000000)
    assert sum(h["count"] for h in report["history_per_hour"]) == 2
