"""The db commands' own output, as a user runs them."""

from __future__ import annotations

import subprocess
import sys

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore import migrate
from tests.conftest import REPO


def mqstore(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mqstore", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_upgrade_to_an_older_revision_says_it_stayed(dsn: str) -> None:
    result = mqstore("db", "upgrade", "--revision", "0001", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"database is at revision {migrate.head_revision()}, past 0001")
    assert "`mqstore db downgrade 0001` does" in first


def test_upgrade_names_the_revision_it_reached(empty_dsn: str) -> None:
    result = mqstore("db", "upgrade", "--revision", "0001", "--dsn", empty_dsn)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "database upgraded to revision 0001"
    result = mqstore("db", "upgrade", "--dsn", empty_dsn)
    assert (
        result.stdout.splitlines()[0] == f"database upgraded to revision {migrate.head_revision()}"
    )


def test_status_of_a_database_newer_than_this_mqstore_says_what_to_do(
    dsn: str, engine: Engine
) -> None:
    with engine.begin() as conn:  # as a newer mqstore leaves it
        conn.execute(sa.text("UPDATE mqstore_version SET version_num = '0099'"))
    result = mqstore("db", "status", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    head = migrate.head_revision()
    assert result.stdout.splitlines()[-1] == (
        f"schema revision: 0099 (head {head}): database schema is at revision 0099, newer than "
        f"this mqstore knows (head {head}): upgrade mqstore"
    )
    for command in ("check", "upgrade"):
        refused = mqstore("db", command, "--dsn", dsn)
        assert refused.returncode != 0
        assert f"newer than this mqstore knows (head {head}): upgrade mqstore" in refused.stderr
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == "0099"
