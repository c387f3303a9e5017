"""``audit --archive DIR`` reads the history of an export of the audited database and table
prefix only: another one's is refused in one line, before Spark starts, and nothing is written.
Rows ``history trim --exported DIR`` deleted are counted from DIR, once."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from mqstore.db import create_engine
from mqstore.errors import ConfigError
from spark_etl.audit import audit
from spark_etl.export import export
from tests.conftest import Databases, load_activemq_fixture
from tests.integration.test_cli import mqstore
from tests.spark.conftest import dsn_of, execute, fetch, spark_job

NOW = 1795310000000  # 2026-11-22 01:13:20 UTC
HOUR = 3_600_000


@pytest.fixture
def other_activemq(databases: Databases) -> Iterator[Engine]:
    """A second plain ActiveMQ database (same rows) on the same server."""
    eng = create_engine(databases.dsn_for(databases.create()))
    load_activemq_fixture(eng)
    yield eng
    eng.dispose()


def _removal(engine: Engine, hist_id: int, removed_at: int, outcome: str) -> None:
    execute(
        engine,
        "INSERT INTO mqstore_history (hist_id, id, container, msgid_prod, msgid_seq, priority,"
        " expiration, enqueued_at, removed_at, outcome) OVERRIDING SYSTEM VALUE VALUES (:h, :h,"
        " 'queue://Q', 'ID:x-1-2-3:1:1', :h, 0, 0, :at - 1000, :at, :o)",
        {"h": hist_id, "at": removed_at, "o": outcome},
    )


def test_audit_counts_history_trimmed_after_export_from_the_archive_once(
    spark: Any, engine: Engine, tmp_path: Path
) -> None:
    """After ``history trim --exported DIR`` the trimmed hours are in DIR only: the audit
    reads them there, and counts a row both hold (exported, not yet trimmed) once."""
    for hist_id, removed_at, outcome in (
        (1, NOW - 48 * HOUR, "acknowledged"),
        (2, NOW - 48 * HOUR + 1, "acknowledged"),
        (3, NOW - 47 * HOUR, "expired"),
        (4, NOW - 600_000, "acknowledged"),  # within the trim's late-commit grace: kept
    ):
        _removal(engine, hist_id, removed_at, outcome)
    dsn, archive = dsn_of(engine), tmp_path / "archive"
    assert export(spark, dsn, archive, now_ms=NOW).history_rows == 4
    trim = mqstore("history", "trim", "--dsn", dsn, "--exported", str(archive))
    assert "deleted 3 history row(s)" in trim.stdout, trim.stderr
    _removal(engine, 5, NOW - 300_000, "expired")  # not exported yet
    assert [r[0] for r in fetch(engine, "SELECT hist_id FROM mqstore_history ORDER BY 1")] == [4, 5]

    report = audit(spark, dsn, tmp_path / "report", archive=archive, now_ms=NOW)
    assert report["history_per_hour"] == [
        {"hour": "2026-11-20 01:00", "outcome": "acknowledged", "count": 2},
        {"hour": "2026-11-20 02:00", "outcome": "expired", "count": 1},
        {"hour": "2026-11-22 01:00", "outcome": "acknowledged", "count": 1},
        {"hour": "2026-11-22 01:00", "outcome": "expired", "count": 1},
    ]

    # An archive of an older build names no database (the trim never trusted one): it
    # could be another database's, so only the table is counted beside it.
    marks_file = archive / "_watermarks.json"
    marks = json.loads(marks_file.read_text())
    del marks["database"]
    marks_file.write_text(json.dumps(marks))
    older = audit(spark, dsn, tmp_path / "older", archive=archive, now_ms=NOW)
    assert older["history_per_hour"] == [
        {"hour": "2026-11-22 01:00", "outcome": "acknowledged", "count": 1},
        {"hour": "2026-11-22 01:00", "outcome": "expired", "count": 1},
    ]


def _audit_cli(dsn: str, out: Path, *more: str) -> Any:
    return spark_job("audit", "--dsn", dsn, "--out", str(out), "--master", "local[1]", *more)


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_audit_refuses_the_archive_of_another_database_or_prefix(
    spark: Any, activemq_engine: Engine, other_activemq: Engine, tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    export(spark, dsn_of(activemq_engine), archive)
    execute(activemq_engine, "DELETE FROM activemq_msgs WHERE id = 1")
    assert export(spark, dsn_of(activemq_engine), archive).history_rows == 1

    for table in ("msgs", "acks", "lock"):  # the same tables under another prefix
        execute(
            activemq_engine,
            f"CREATE TABLE brk1_activemq_{table} (LIKE activemq_{table} INCLUDING ALL)",
        )
    mine = audit(spark, dsn_of(activemq_engine), tmp_path / "a", archive=archive, now_ms=NOW)
    assert sum(r["count"] for r in mine["history_per_hour"]) == 1

    for dsn, more, words in (
        (dsn_of(other_activemq), (), r"archives database '\w+' .*, not database '\w+'"),
        (dsn_of(activemq_engine), ("--table-prefix", "BRK1_"), r"table prefix '', not 'BRK1_'"),
    ):
        out = tmp_path / "report"
        result = _audit_cli(dsn, out, "--archive", str(archive), *more)
        line = _one_line(result.stderr)
        assert result.returncode == 1, result.stderr
        assert line.startswith(f"error: {archive} holds the export of other tables")
        assert "give --archive the export directory" in line and re.search(words, line), line
        assert not (out / "audit.json").exists()
    with pytest.raises(ConfigError, match="holds the export of other tables"):
        audit(spark, dsn_of(other_activemq), tmp_path / "b", archive=archive, now_ms=NOW)


def test_audit_refuses_an_archive_that_holds_no_export(
    activemq_engine: Engine, tmp_path: Path
) -> None:
    empty = tmp_path / "not-an-export"
    empty.mkdir()
    result = _audit_cli(dsn_of(activemq_engine), tmp_path / "report", "--archive", str(empty))
    assert result.returncode == 1
    line = _one_line(result.stderr)
    assert line.startswith(f"error: --archive {empty} holds no finished export")
    assert not (tmp_path / "report" / "audit.json").exists()
