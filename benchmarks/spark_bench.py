"""Spark export and decode throughput over JDBC.

Workload: N (default 1 000 000) 1 KiB TextMessages with 3 properties over 4 queues, loaded
with psycopg binary COPY into a scratch database ``mqs_spark_bench`` (dropped at the end),
then: (1) JDBC read of ACTIVEMQ_MSGS partitioned on ID + Parquet write, no decoding;
(2) decoding MSG from that Parquet with the Arrow UDF (noop sink); (3) the whole
``spark_etl.export`` (snapshot, read, decode, partitioned write, publish).

Run: ``python benchmarks/spark_bench.py [--rows N] [--admin-dsn postgresql://...]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import psycopg
import sqlalchemy as sa

from mqstore.openwire import JInt, encode, text_message
from mqstore.schema import build_schema
from spark_etl.decode import with_decoded
from spark_etl.export import export
from spark_etl.session import build_session
from spark_etl.sources import jdbc_source, read_msgs

DB = "mqs_spark_bench"
QUEUES = [f"queue://BENCH.Q{i}" for i in range(4)]
PRODUCER = "ID:bench-host-40123-1795306854999-1:1:1"


def _db_dsn(admin_dsn: str) -> str:
    return admin_dsn.rsplit("/", 1)[0] + "/" + DB


def load(admin_dsn: str, rows: int) -> float:
    """(Re)create the scratch database and COPY ``rows`` messages; returns seconds."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB}")
    engine = sa.create_engine(_db_dsn(admin_dsn).replace("postgresql://", "postgresql+psycopg://"))
    build_schema("").metadata.create_all(engine)
    engine.dispose()
    body = ("benchmark payload " * 60)[:1000]
    frames = [
        encode(
            text_message(
                body,
                destination=QUEUES[i % 4],
                producer_id=PRODUCER,
                sequence=i + 1,
                timestamp=1795306859007 + i * 1000,
                properties={"str_prop": f"v-{i}", "int_prop": JInt(i), "tag": "bench"},
            )
        )
        for i in range(1000)
    ]
    started = time.perf_counter()
    with psycopg.connect(_db_dsn(admin_dsn)) as conn, conn.cursor() as cur:
        sql = (
            "COPY activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, msg, priority)"
            " FROM STDIN (FORMAT BINARY)"
        )
        with cur.copy(sql) as copy:
            copy.set_types(["int8", "varchar", "varchar", "int8", "int8", "bytea", "int8"])
            for i in range(rows):
                copy.write_row((i + 1, QUEUES[i % 4], PRODUCER, i + 1, 0, frames[i % 1000], 0))
        conn.execute("ANALYZE activemq_msgs")
    return time.perf_counter() - started


def main() -> None:
    """Load, run the three measurements, print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--admin-dsn",
        default=os.environ.get("MQSTORE_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()
    n = args.rows
    load_s = load(args.admin_dsn, n)
    dsn = _db_dsn(args.admin_dsn)
    t0 = time.perf_counter()
    spark = build_session(args.master, driver_memory="2g")
    start_s = time.perf_counter() - t0
    out = Path(tempfile.mkdtemp(prefix="mqs-spark-bench-"))
    try:
        t0 = time.perf_counter()
        raw = out / "raw"
        read_msgs(spark, jdbc_source(dsn)).write.partitionBy("container").parquet(str(raw))
        rw_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        decoded = with_decoded(spark.read.parquet(str(raw)), keep_msg=False)
        decoded.write.format("noop").mode("overwrite").save()
        decode_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        result = export(spark, dsn, out / "export")
        export_s = time.perf_counter() - t0
        assert result.message_rows == n, result.messages
    finally:
        spark.stop()
        shutil.rmtree(out, ignore_errors=True)
        if not args.keep:
            with psycopg.connect(args.admin_dsn, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    cores = os.cpu_count()
    print(f"spark_bench: {n} x ~1 KiB TextMessages, {args.master}, {cores} cores, "
          f"{platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()}")  # fmt: skip
    print(f"{'step':<44}{'seconds':>10}{'rows/s':>12}")
    for name, secs in (
        ("load (psycopg binary COPY)", load_s),
        ("session start", None),
        ("JDBC read + Parquet write (no decode)", rw_s),
        ("decode MSG (Arrow UDF, from Parquet)", decode_s),
        ("export() end to end (incl. decode)", export_s),
    ):
        if secs is None:
            print(f"{name:<44}{start_s:>10.1f}{'':>12}")
        else:
            print(f"{name:<44}{secs:>10.1f}{n / secs:>12,.0f}")


if __name__ == "__main__":
    main()
