"""An operator's mistakes the CLI must answer with one line and exit code 2, harming nothing:
settings beyond any clock, a password with a raw '@', a journal command pointed at the
data directory instead of its journal, a trim on a schema newer than this mqstore, a count
beyond BIGINT; and what it must not say: a DSN's surrounding whitespace is no part of it,
ActiveMQ's tables want ``db adopt``, a downgrade or repair that did nothing says so."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from journal import AddMessage, Journal
from mqstore import migrate
from tests.integration.test_cli import mqstore


def _one_line_error(result: subprocess.CompletedProcess[str], words: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("days", ["inf", "1e308"])
def test_history_trim_older_than_days_beyond_any_clock(dsn: str, days: str) -> None:
    result = mqstore("history", "trim", "--older-than-days", days, "--dsn", dsn)
    _one_line_error(result, "history_retention_days")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MQSTORE_HISTORY_RETENTION_DAYS", "inf"),
        ("MQSTORE_HISTORY_RETENTION_DAYS", "1e308"),
        ("MQSTORE_CLEANUP_INTERVAL_S", "inf"),  # the broker's cleanup thread died of it
        ("MQSTORE_CLEANUP_INTERVAL_S", "1e300"),
        ("MQSTORE_DESTINATION_GC_S", "infinity"),
    ],
)
def test_a_period_setting_beyond_any_clock_is_refused(dsn: str, variable: str, value: str) -> None:
    env = {**os.environ, variable: value}
    result = mqstore("history", "trim", "--dry-run", "--dsn", dsn, env=env)
    _one_line_error(result, variable)


def test_an_unencoded_at_sign_in_the_password_is_not_shown() -> None:
    """``p@ss`` parses as password ``p`` and host ``ss@127.0.0.1``: the error named that
    host, and so showed the rest of the password."""
    result = mqstore("lock", "status", "--dsn", "postgresql://mq:p@ss-secret@127.0.0.1:1/broker")
    _one_line_error(result, "%40")
    assert "ss-secret" not in result.stderr


@pytest.mark.parametrize("command", [["inspect"], ["inspect", "--json"], ["repair", "--dry-run"]])
def test_a_journal_command_on_the_data_directory_names_its_journal(
    tmp_path: Path, command: list[str]
) -> None:
    data = tmp_path / "mqstore-data"
    (data / "journal").mkdir(parents=True)
    (data / "journal" / "journal-id").write_text("3e3a8f0e-5c1e-4c57-9f6e-0a4f1c1b2d3e\n")
    result = mqstore("journal", *command, str(data))
    _one_line_error(result, f"{data / 'journal'}")
    assert os.listdir(data) == ["journal"]  # no lock file left in it


def test_journal_repair_of_a_directory_that_holds_no_journal_leaves_it_alone(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("not a journal\n")
    result = mqstore("journal", "repair", str(tmp_path))
    _one_line_error(result, "holds no journal")
    assert "repaired" not in result.stdout
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


def _history_rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM mqstore_history")).scalar_one())


def _old_history_row(engine: Engine) -> None:
    with engine.begin() as conn:  # removed in 1970: any trim may take it
        conn.execute(
            sa.text(
                "INSERT INTO mqstore_history (id, container, removed_at, outcome) "
                "VALUES (1, 'queue://q', 1000, 'acked')"
            )
        )


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_history_trim_refuses_a_schema_newer_than_this_mqstore(
    dsn: str, engine: Engine, dry_run: list[str]
) -> None:
    """A newer mqstore may have changed what history rows mean: trim refuses there, as
    ``db downgrade`` and ``journal forget`` do, and deletes nothing."""
    _old_history_row(engine)
    with engine.begin() as conn:  # as a newer mqstore leaves it
        conn.execute(sa.text("UPDATE mqstore_version SET version_num = '0099'"))
    result = mqstore("history", "trim", "--older-than-days", "5", *dry_run, "--dsn", dsn)
    _one_line_error(result, "revision 0099, newer than this mqstore knows")
    assert _history_rows(engine) == 1


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (["history", "trim", "--older-than-days", "5"], "--batch"),
        (["browse", "queue://q"], "--limit"),
    ],
)
def test_a_count_beyond_bigint_is_a_usage_error(
    dsn: str, engine: Engine, command: list[str], option: str
) -> None:
    """PostgreSQL's LIMIT takes a BIGINT: a larger count was a DataError traceback."""
    _old_history_row(engine)
    result = mqstore(*command, option, "99999999999999999999", "--dsn", dsn)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"Invalid value for '{option}'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "DataError" not in result.stderr
    assert _history_rows(engine) == 1


@pytest.mark.parametrize("around", ["{}\n", "{} ", " {}", "\t{}\r\n"])
@pytest.mark.parametrize("given", ["--dsn", "MQSTORE_DSN"])
def test_whitespace_around_the_dsn_is_ignored(dsn: str, around: str, given: str) -> None:
    """A DSN read from a secret file ends in a newline: it named a database "x\\n" (an error
    cut at the newline), a trailing space one named "x "."""
    value = around.format(dsn)
    if given == "--dsn":
        result = mqstore("lock", "status", "--dsn", value)
    else:
        result = mqstore("lock", "status", env={**os.environ, "MQSTORE_DSN": value})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("activemq_lock: "), result.stdout


def test_status_of_an_activemq_database_says_adopt(empty_dsn: str, activemq_engine: Engine) -> None:
    """``db upgrade`` refuses ActiveMQ's tables: status and check lead with ``db adopt``."""
    status = mqstore("db", "status", "--dsn", empty_dsn)
    assert status.returncode == 0, status.stderr
    last = status.stdout.splitlines()[-1]
    assert "run `mqstore db adopt`" in last and "db upgrade" not in last, last
    check = mqstore("db", "check", "--dsn", empty_dsn)
    assert check.returncode == 1
    assert "run `mqstore db adopt`" in check.stderr.splitlines()[0], check.stderr
    assert mqstore("db", "upgrade", "--dsn", empty_dsn).returncode == 2  # as it says
    assert mqstore("db", "adopt", "--dsn", empty_dsn).returncode == 0


@pytest.mark.parametrize("target", ["head", migrate.head_revision()])
def test_a_downgrade_to_where_the_database_is_says_nothing_was_downgraded(
    dsn: str, engine: Engine, target: str
) -> None:
    head = migrate.head_revision()
    result = mqstore("db", "downgrade", target, "--yes", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.strip() == f"database is already at revision {head}: nothing was downgraded"
    )
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == head
    previous = migrate.known_revisions()[-2]
    result = mqstore("db", "downgrade", previous, "--yes", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"database downgraded to {previous}"


def test_journal_repair_of_an_intact_journal_only_says_so(tmp_path: Path) -> None:
    with Journal.open(tmp_path) as journal:
        journal.append([AddMessage(1, "queue://q", "ID:p:1:1", 1, 0, 4, b"body")])
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.wal")}
    result = mqstore("journal", "repair", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"journal {tmp_path} is intact; nothing to repair"]
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.wal")} == before


def test_a_dsn_of_only_whitespace_is_no_dsn(tmp_path: Path) -> None:
    """An empty secret file's newline in ``MQSTORE_DSN``: the embedded store, as unset."""
    data = ["--data-dir", str(tmp_path / "mqstore-data")]
    unset = mqstore("stats", *data, env={k: v for k, v in os.environ.items() if k != "MQSTORE_DSN"})
    blank = mqstore("stats", *data, env={**os.environ, "MQSTORE_DSN": " \n"})
    assert blank.returncode == unset.returncode, (blank.stderr, unset.stderr)
    assert blank.stderr == unset.stderr and "expected a URL" not in blank.stderr
