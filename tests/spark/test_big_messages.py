"""Big messages and the export's memory: many that together exceed the heap are read a
few at a time; one too big for it gives one line saying what to raise, nothing committed,
and a rerun with more memory exports it once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sqlalchemy.engine import Engine

from mqstore.openwire import bytes_message, encode, text_message
from tests.conftest import small_tmpfs
from tests.spark.conftest import dsn_of, execute, spark_job

BODY_BYTES = 40 * 1024 * 1024


def _store_big_messages(engine: Engine, count: int, body_bytes: int) -> None:
    """``count`` rows (IDs 1..count) holding one message of ``body_bytes`` characters."""
    msg = text_message(
        "x" * body_bytes,
        destination="queue://BIG",
        producer_id="ID:big-1-2-3:1:1",
        sequence=1,
        broker_sequence_id=1,
        timestamp=1795400000000,
    )
    execute(
        engine,
        "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, msg,"
        " priority) SELECT g, 'queue://BIG', :p, g, 0, :m, 0 FROM generate_series(1, :n) g",
        {"p": msg.msgid_prod, "m": encode(msg), "n": count},
    )


def _archived_ids(out: Path) -> list[int]:
    return sorted(
        i
        for f in out.glob("messages/**/*.parquet")
        for i in pq.read_table(f, columns=["id"])["id"].to_pylist()
    )


def _own_tracebacks(stderr: str) -> list[str]:
    """Tracebacks of the command itself: not those Spark's Python worker daemon prints when
    the JVM it serves dies (a BrokenPipeError in pyspark/daemon.py), which come with the
    JVM's own log."""
    blocks = stderr.split("Traceback (most recent call last):")[1:]
    return [b for b in blocks if "pyspark/daemon.py" not in b.split("\n", 2)[1]]


@pytest.mark.slow
def test_messages_that_together_exceed_the_heap_are_exported_and_audited(
    engine: Engine, tmp_path: Path
) -> None:
    # 150 messages of 4 MiB: 600 MiB, more than the whole 512 MiB heap if one fetch, one
    # Parquet buffer or the audit's cached rows held them all.
    _store_big_messages(engine, 150, 4 * 1024 * 1024)
    small = ("--dsn", dsn_of(engine), "--master", "local[1]", "--driver-memory", "512m")
    out = tmp_path / "archive"
    exported = spark_job("export", "--out", str(out), *small)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert _archived_ids(out) == list(range(1, 151))
    audited = spark_job("audit", "--out", str(tmp_path / "audit"), *small)
    assert audited.returncode == 0, audited.stderr[-3000:]
    report = json.loads((tmp_path / "audit" / "audit.json").read_text())
    assert report["counts"]["messages"] == 150


@pytest.mark.slow
def test_out_of_memory_is_one_line_and_a_rerun_with_more_exports_once(
    engine: Engine, tmp_path: Path
) -> None:
    _store_big_messages(engine, 1, BODY_BYTES)
    out = tmp_path / "archive"
    args = ("export", "--dsn", dsn_of(engine), "--out", str(out), "--master", "local[1]")

    short = spark_job(*args, "--driver-memory", "512m")
    assert short.returncode == 1 and not _own_tracebacks(short.stderr), short.stderr[-3000:]
    last = short.stderr.strip().splitlines()[-1]  # the JVM's own log comes before it
    assert last.startswith("error: ") and "nothing was committed" in last, last
    assert "memory" in last and "--driver-memory 512m" in last, last
    assert not (out / "_watermarks.json").exists()
    assert not list(out.glob("messages/**/*.parquet"))

    enough = spark_job(*args, "--driver-memory", "2g")
    assert enough.returncode == 0, enough.stderr[-3000:]
    assert _archived_ids(out) == [1]
    assert json.loads((out / "_watermarks.json").read_text())["msgs_max_id"] == 1


def test_driver_memory_must_be_a_size(engine: Engine, tmp_path: Path) -> None:
    result = spark_job(
        "audit", "--dsn", dsn_of(engine), "--out", str(tmp_path), "--driver-memory", "2 GB"
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: invalid --driver-memory '2 GB': give a size such as 2g or 512m"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small file system needs root")
def test_a_full_disk_is_one_line_naming_it_and_spark_logs_to_a_file(
    engine: Engine, tmp_path: Path
) -> None:
    """Spark's executors log their stack traces and the Python workers their tracebacks; the
    command's stderr is one line with the innermost cause, the log file is named in it."""
    noise = bytes_message(
        os.urandom(512 * 1024), destination="queue://FULL", producer_id="ID:f-1-2-3:1:1", sequence=1
    )
    execute(
        engine,
        "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, msg,"
        " priority) SELECT g, 'queue://FULL', :p, g, 0, :m, 0 FROM generate_series(1, 8) g",
        {"p": noise.msgid_prod, "m": encode(noise)},
    )  # 4 MiB that do not compress, twice (MSG and body), into 2 MiB
    with small_tmpfs(tmp_path / "small", "2m") as out:
        full = spark_job(
            "export", "--dsn", dsn_of(engine), "--out", str(out), "--master", "local[1]"
        )
    assert full.returncode == 1
    lines = full.stderr.strip().splitlines()
    assert len(lines) == 1, f"{len(lines)} lines, the last: {lines[-1]}"
    line = lines[0]
    assert line.startswith("error: the Spark job failed: ") and "No space left on device" in line
    assert ": :" not in line and f"Spark's log: {out / '_logs' / 'export.log'}" in line
