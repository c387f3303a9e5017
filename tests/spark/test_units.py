"""Pure parts of spark_etl: DSN translation, jar lookup, per-row decoding, SVG charts, CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from spark_etl import cli, job_failure, launch, session
from spark_etl.decode import decode_msg
from spark_etl.durable import write_atomically
from spark_etl.report_html import bar_chart
from spark_etl.sources import SourceError, jdbc_source


def test_jdbc_url_from_dsn() -> None:
    src = jdbc_source("postgresql+psycopg://app:s%40cret@db.example:6543/broker?sslmode=require")
    assert src.url == "jdbc:postgresql://db.example:6543/broker?sslmode=require"
    assert src.properties == {"user": "app", "password": "s@cret"}
    assert src.table("ACTIVEMQ_MSGS") == "activemq_msgs"
    assert jdbc_source("postgres://u@h/d", "BRK1_").table("ACTIVEMQ_ACKS") == "brk1_activemq_acks"
    assert jdbc_source("postgresql://u@h/d").options()["fetchsize"] == "10000"


def test_jdbc_reads_the_server_and_database_libpq_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks before Spark connect with libpq, which takes a port or database the DSN
    leaves out from PGPORT and PGDATABASE: the JDBC reads must go to that same database."""
    monkeypatch.setenv("PGPORT", "5433")
    monkeypatch.setenv("PGDATABASE", "broker")
    assert (
        jdbc_source("postgresql://u@db.example").url == "jdbc:postgresql://db.example:5433/broker"
    )
    assert jdbc_source("postgresql://u@h:6543/d").url == "jdbc:postgresql://h:6543/d"


def test_dsn_values_mean_to_pgjdbc_what_they_mean_to_libpq() -> None:
    """libpq percent-decodes a URI and keeps ``+``; pgjdbc URL-decodes its URL, where ``+``
    is a space: what the DSN says reaches pgjdbc unchanged."""
    src = jdbc_source(
        "postgresql://u@h:5432/my%2Bdb%20x?password=a+b&sslrootcert=/tmp/a+b%25.crt"
        "&application_name=x%20y"
    )
    assert src.properties["password"] == "a+b"
    assert src.url == (
        "jdbc:postgresql://h:5432/my%2Bdb%20x"
        "?application_name=x%20y&sslrootcert=%2Ftmp%2Fa%2Bb%25.crt"
    )


@pytest.mark.parametrize(
    "dsn", ["postgresql://u@/db?host=/var/run/postgresql", "postgresql:///db", "mysql://h/db"]
)
def test_unusable_dsns_are_refused_with_the_fix(dsn: str) -> None:
    with pytest.raises(SourceError, match=r"TCP host|invalid DSN"):
        jdbc_source(dsn)


@pytest.mark.parametrize(
    ("master", "threads"),
    [("local", "1"), ("local[1]", "1"), ("local[2]", "2"), ("local[3, 2]", "3")],
)
def test_a_local_master_reads_with_as_many_partitions_as_it_has_threads(
    master: str, threads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--master local[2]`` on a machine of many cores opens two JDBC connections per read,
    not one per core of the machine."""
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    conf = session.local_conf(master, "pg.jar", fast_start=False, driver_memory="2g")
    assert conf["spark.default.parallelism"] == conf["spark.sql.shuffle.partitions"] == threads
    wide = session.local_conf("local[*]", "pg.jar", fast_start=False, driver_memory="2g")
    assert wide["spark.default.parallelism"] == "64"


def test_jar_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jar = tmp_path / "pg.jar"
    jar.write_bytes(b"PK")
    monkeypatch.setenv("MQSTORE_JDBC_JAR", str(jar))
    assert session.find_jdbc_jar() == str(jar)
    monkeypatch.setenv("MQSTORE_JDBC_JAR", str(tmp_path / "missing.jar"))
    with pytest.raises(session.JdbcJarMissingError, match=r"missing\.jar"):
        session.find_jdbc_jar()
    monkeypatch.delenv("MQSTORE_JDBC_JAR")
    monkeypatch.setattr(session, "DEBIAN_JAR", str(tmp_path / "nope.jar"))
    with pytest.raises(
        session.JdbcJarMissingError,
        match=r"apt-get install libpostgresql-jdbc-java.*or set MQSTORE_JDBC_JAR",
    ):
        session.find_jdbc_jar()


def test_bad_msg_gives_decode_error_not_an_exception() -> None:
    row = decode_msg(b"\x00\x00\x00\x05\x1c\x01")
    assert row["decode_error"] and row["kind"] is None
    assert decode_msg(None) == {**dict.fromkeys(row), "decode_error": "MSG is NULL"}


def test_bar_chart_is_plain_svg() -> None:
    svg = bar_chart("t", ["a", "b"], {"x": [1, 3], "y": [2, 0]})
    assert svg.startswith("<svg") and svg.count("<rect") == 3 + 2  # 3 bars + 2 legend keys
    assert "no data" in bar_chart("t", [], {"x": []})


def test_commands_register_and_explain_missing_pyspark(monkeypatch: pytest.MonkeyPatch) -> None:
    app = typer.Typer()
    cli.register(app)
    runner = CliRunner()
    assert "--table-prefix" in runner.invoke(app, ["export", "--help"]).output
    monkeypatch.setitem(sys.modules, "pyspark", None)
    result = runner.invoke(app, ["audit", "--out", "x", "--dsn", "postgresql://u@h/d"])
    assert result.exit_code == 1
    assert "pip install 'mqstore[spark]'" in result.output


@pytest.mark.parametrize(
    ("stack", "says"),
    [
        ("Caused by: java.lang.OutOfMemoryError: Java heap space", "ran out of memory"),
        (
            "Caused by: java.io.IOException: No space left on device",
            "the Spark job failed: java.io.IOException: No space left on device (",
        ),
        (
            "Caused by: org.postgresql.util.PSQLException: FATAL: terminating connection",
            "the Spark job failed: org.postgresql.util.PSQLException: FATAL: terminating",
        ),
    ],
)
def test_a_task_out_of_memory_reported_as_an_internal_error_names_driver_memory(
    spark: Any, stack: str, says: str
) -> None:
    """Spark may report a task's OutOfMemoryError as ``[INTERNAL_ERROR] Executed command
    failed``, the OOM only in the Java causes PySpark keeps beside that first line."""
    from pyspark.errors.exceptions.captured import CapturedException

    del spark  # a running JVM, which PySpark's exceptions are made in
    failure = CapturedException(
        desc="[INTERNAL_ERROR] Executed command failed. You hit a bug in Spark",
        stackTrace=f"org.apache.spark.SparkException: Executed command failed\n{stack}\n\tat x",
    )
    not_ours = SimpleNamespace(sparkContext=SimpleNamespace())  # a JVM spark-submit started
    line = job_failure.spark_failure(failure, not_ours, "512m")
    assert says in line
    assert ("--driver-memory 512m" in line) == (says == "ran out of memory")


def test_a_first_line_without_its_class_is_told_without_a_leading_colon() -> None:
    """PySpark words some failures ``: org.apache.spark.SparkException: ...``."""
    failure = RuntimeError(": org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed")
    said = job_failure.first_line(failure)
    assert said == "org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed"


def test_py4j_failing_to_call_into_a_jvm_exiting_out_of_memory_names_driver_memory() -> None:
    """The JVM exiting with Spark's out-of-memory code (52) while py4j calls into it."""
    from py4j.protocol import Py4JError

    jvm = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(52)"])
    ours = SimpleNamespace(sparkContext=SimpleNamespace(_gateway=SimpleNamespace(proc=jvm)))
    failure = Py4JError("py4j.reflection.TypeUtil.isInstanceOf does not exist in the JVM")
    line = job_failure.spark_failure(failure, ours, "512m")
    assert "ran out of memory" in line and "--driver-memory 512m" in line


def test_a_report_write_that_fails_leaves_the_previous_report_whole(tmp_path: Path) -> None:
    # What a monitor reading audit.json (or the disk after a crash) must never see: a part.
    report = tmp_path / "audit.json"
    report.write_text('{"violations": []}')
    with pytest.raises(UnicodeEncodeError):
        write_atomically(report, '{"violations": ["\udc80"]}')  # fails halfway through
    assert report.read_text() == '{"violations": []}'
    assert [p.name for p in tmp_path.iterdir()] == ["audit.json"]
    write_atomically(report, '{"violations": ["late"]}')
    assert report.read_text() == '{"violations": ["late"]}'


@pytest.mark.parametrize(
    ("dsn", "says"),
    [
        ("postgresql://u@[::1/db", "invalid DSN: Invalid IPv6 URL"),
        ("postgresql://u@h:99999/db", "invalid port '99999' in the DSN host 'h:99999'"),
        ("postgresql://u@h:5432/db?port=5x", "invalid port '5x' in the DSN's port parameter"),
    ],
)
def test_a_malformed_dsn_is_one_line_naming_what_is_wrong(
    dsn: str, says: str, tmp_path: Path
) -> None:
    with pytest.raises(SourceError, match=re.escape(says)):
        jdbc_source(dsn)
    app = typer.Typer()
    cli.register(app)
    result = CliRunner().invoke(app, ["export", "--out", str(tmp_path), "--dsn", dsn])
    assert result.exit_code == 1 and result.exception is not None
    assert not isinstance(result.exception, ValueError)  # no traceback
    [line] = result.output.strip().splitlines()
    assert line.startswith(f"error: {says}")


def test_thresholds_crossed_are_told_in_whole_figures() -> None:
    """A depth of 1 234 567 against 1 000 000 read ``1.23457e+06 > 1e+06`` (so did its bar in
    the HTML report), a backlog one over a million ``1e+06 > 1e+06``."""
    from spark_etl.audit import Thresholds, check

    sub = {"container": "topic://T", "client_id": "c", "sub_name": "s", "backlog": 1_000_001}
    report = {
        "destinations": [{"destination": "queue://A", "depth": 1_234_567}],
        "subscriptions": [{**sub, "oldest_pending_age_ms": 12_345_678_901}],
        "counts": {
            "expired": 0,
            "in_doubt": 0,
            "malformed_xids": 0,
            "undecodable": 0,
            "duplicate_message_ids": 0,
            "priority_out_of_range": 0,
            "container_mismatches": 0,
            "msgid_mismatches": 0,
        },
        "lock": {"lease_age_ms": 61_500},
    }
    limits = Thresholds(
        max_depth=1_000_000, max_backlog=1_000_000, max_pending_age_s=3600, max_lease_age_s=60.25
    )
    assert check(report, limits) == [
        "depth of queue://A: 1234567 > 1000000",
        "backlog of topic://T c/s: 1000001 > 1000000",  # was 1e+06 > 1e+06
        "pending age of topic://T c/s: 12345678.901 > 3600",
        "lease age: 61.5 > 60.25",
    ]
    assert ">1234567</text>" in bar_chart("Depth per destination", ["queue://A"], {"n": [1234567]})


def test_the_export_summary_shows_destination_names_with_brackets_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Destination names are text, not Rich markup: ``[prod]`` vanished from the table and
    ``[/b]`` failed the command (a traceback, exit 1) after its run had committed."""
    from spark_etl import export as export_mod

    names = ["queue://events[prod]", "queue://a[/b]", "topic://x[bold]y"]
    result = export_mod.ExportResult(
        run_id="r1", messages=dict.fromkeys(names, 1), history={names[1]: 2}
    )
    monkeypatch.setattr(cli, "_preflight", lambda *_args: {"name": "db"})
    monkeypatch.setattr(cli, "_session", lambda *_args: None)
    monkeypatch.setattr(cli, "_stop", lambda _spark: None)
    monkeypatch.setattr(export_mod, "export", lambda *_args, **_kw: result)
    monkeypatch.setenv("COLUMNS", "200")
    app = typer.Typer()
    cli.register(app)
    out = CliRunner().invoke(app, ["export", "--out", str(tmp_path), "--dsn", "postgresql://u@h/d"])
    assert out.exit_code == 0, out.output
    assert all(name in out.output for name in names), out.output


def test_a_table_prefix_no_broker_can_use_is_named_not_blamed_on_the_connection(
    tmp_path: Path,
) -> None:
    """``MQSTORE_TABLE_PREFIX="BRK1_ "`` (a stray space) read as 'cannot connect to
    PostgreSQL (invalid name syntax): is the server running and the DSN right?'."""
    assert jdbc_source("postgresql://u@h/d", "_Brk$1_").table("ACTIVEMQ_MSGS") == (
        "_brk$1_activemq_msgs"
    )
    with pytest.raises(SourceError, match=r"invalid --table-prefix 'BRK1_ ': .*e\.g\. BRK1_"):
        jdbc_source("postgresql://u@h/d", "BRK1_ ")
    app = typer.Typer()
    cli.register(app)
    args = ["--out", str(tmp_path), "--dsn", "postgresql://u@h/d", "--table-prefix", "1 x"]
    result = CliRunner().invoke(app, ["audit", *args])
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: invalid --table-prefix '1 x'")


@pytest.mark.parametrize(
    ("given", "heap"), [("2g", "2g"), ("2048", "2048m"), ("512M", "512m"), ("4194304k", "4194304k")]
)
def test_driver_memory_reads_a_bare_number_as_mib_as_spark_does(given: str, heap: str) -> None:
    assert launch.driver_memory(given) == heap


@pytest.mark.parametrize("given", ["1024k", "256m", "100", "0", "2 GB", "2gb", ""])
def test_a_driver_memory_spark_cannot_start_with_is_refused_saying_what_to_give(
    given: str,
) -> None:
    with pytest.raises(ValueError, match=r"give a size such as 2g or 512m"):
        launch.driver_memory(given)
