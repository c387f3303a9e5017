"""The db commands' own output, as a user runs them."""

from __future__ import annotations

import subprocess
import sys

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
    assert first.startswith("database is at revision 0002, past 0001")
    assert "`mqstore db downgrade 0001` does" in first


def test_upgrade_names_the_revision_it_reached(empty_dsn: str) -> None:
    result = mqstore("db", "upgrade", "--revision", "0001", "--dsn", empty_dsn)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "database upgraded to revision 0001"
    result = mqstore("db", "upgrade", "--dsn", empty_dsn)
    assert result.stdout.splitlines()[0] == "database upgraded to revision 0002"
