"""A role granted SELECT alone (a monitoring or reporting role) may run the commands that
only read: `db check` and `history trim --dry-run`. A trim that deletes still names the
GRANT the role lacks."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from mqstore.db import libpq_dsn
from tests.conftest import Databases
from tests.integration.test_cli import mqstore

_roles = itertools.count()


@pytest.fixture
def read_only_dsn(databases: Databases, dsn: str) -> Iterator[str]:
    """``dsn`` with its sessions run as a role granted SELECT on every table, nothing else."""
    name = f"mqs_t{os.getpid()}_ro_{next(_roles)}"
    with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
    with psycopg.connect(libpq_dsn(dsn), autocommit=True) as conn:
        conn.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(
                sql.Identifier(name)
            )
        )
    try:
        url = make_url(dsn).update_query_dict({"options": f"-crole={name}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with psycopg.connect(libpq_dsn(dsn), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


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
