"""`mqstore lock status` and `stats` probe the lock row for a row-lock master; when the
session may not lock it they say why: the session (or database) is read-only, or the role
lacks UPDATE on the lock table; not that a role which may lock rows may not."""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import Engine, make_url

from tests.conftest import Databases, scratch_role
from tests.integration.test_cli import mqstore


def _lock_states(dsn: str) -> tuple[str, str]:
    """What ``lock status`` and ``stats --json`` say of the lock."""
    status = mqstore("lock", "status", "--dsn", dsn)
    assert status.returncode == 0, status.stderr
    stats = mqstore("stats", "--json", "--dsn", dsn)
    assert stats.returncode == 0, stats.stderr
    return status.stdout, str(json.loads(stats.stdout)["lock"]["state"])


@pytest.mark.parametrize("where", ["dsn", "database"])
def test_a_read_only_session_is_named_as_such(
    dsn: str, engine: Engine, databases: Databases, where: str
) -> None:
    if where == "dsn":
        url = make_url(dsn).update_query_dict({"options": "-cdefault_transaction_read_only=on"})
        read_only = url.render_as_string(hide_password=False)
    else:
        name = make_url(dsn).database
        with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(
                    sql.Identifier(name)
                )
            )
        read_only = dsn
    for said in _lock_states(read_only):
        assert said.startswith("free") or "free" in said.splitlines()[0], said
        assert "a row lock cannot be seen: this session is read-only" in said, said
        assert "run this against the primary" in said, said
        assert "this role may not lock rows" not in said, said


@pytest.fixture
def select_only_role(databases: Databases, dsn: str, engine: Engine) -> Iterator[str]:
    """A role that may read the tables but not update them, dropped afterwards."""
    grant = "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"
    with scratch_role(databases, dsn, "readers", grant) as name:
        try:
            yield name
        finally:
            engine.dispose()


def test_a_role_without_update_on_the_lock_table_is_told_what_to_grant(
    dsn: str, select_only_role: str
) -> None:
    url = make_url(dsn).update_query_dict({"options": f"-crole={select_only_role}"})
    status, _ = _lock_states(url.render_as_string(hide_password=False))
    assert "a row lock cannot be seen: this role may not lock activemq_lock's row" in status
    assert "GRANT UPDATE ON activemq_lock" in status, status
