"""A role granted SELECT alone (a monitoring or reporting role) may run the commands that
only read: `db check` and `history trim --dry-run`. A trim that deletes still names the
GRANT the role lacks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import Databases, as_role, scratch_role
from tests.integration.test_cli import mqstore


@pytest.fixture
def read_only_dsn(databases: Databases, dsn: str) -> Iterator[str]:
    """``dsn`` with its sessions run as a role granted SELECT on every table, nothing else."""
    grant = "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"
    with scratch_role(databases, dsn, "ro", grant) as name:
        yield as_role(dsn, name)


def test_db_check_needs_only_select(read_only_dsn: str) -> None:
    check = mqstore("db", "check", "--dsn", read_only_dsn)
    assert check.returncode == 0, check.stderr
    assert "schema OK" in check.stdout


def test_history_trim_dry_run_needs_only_select(read_only_dsn: str) -> None:
    dry = mqstore("history", "trim", "--older-than-days", "1", "--dry-run", "--dsn", read_only_dsn)
    assert dry.returncode == 0, dry.stderr
    assert "would delete 0 history row(s)" in dry.stdout


def test_history_trim_that_deletes_names_the_grant_a_read_only_role_lacks(
    read_only_dsn: str,
) -> None:
    trim = mqstore("history", "trim", "--older-than-days", "1", "--dsn", read_only_dsn)
    assert trim.returncode == 2, (trim.stdout, trim.stderr)
    assert "lacks INSERT, UPDATE, DELETE" in trim.stderr
    assert "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public" in trim.stderr
