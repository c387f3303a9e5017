"""A server that turns a connection away because its slots are used up (SQLSTATE 53300:
the server's max_connections, or a role's or database's CONNECTION LIMIT) is reported as
that, with what to do, not as a server that may not be running."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from mqstore.db import describe_connect_error, parse_dsn
from tests.conftest import Databases
from tests.integration.test_cli import mqstore

_roles = itertools.count()


@pytest.fixture
def limited_role(databases: Databases) -> Iterator[str]:
    """A login role with CONNECTION LIMIT 0 that may use the test database, dropped after."""
    name = f"mqs_t{os.getpid()}_slots_{next(_roles)}"
    with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT 0").format(sql.Identifier(name))
        )
    try:
        yield name
    finally:
        with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_a_role_past_its_connection_limit_is_told_to_wait_or_raise_it(
    dsn: str, limited_role: str
) -> None:
    url = make_url(dsn).set(username=limited_role, password=None)
    result = mqstore("db", "check", "--dsn", url.render_as_string(hide_password=False))
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "too many connections for role" in last, last
    assert f"role {limited_role!r} has used up its CONNECTION LIMIT" in last, last
    assert "ALTER ROLE" in last and "up to 16 connections" in last, last
    assert "is the server running" not in last, last


def test_a_database_past_its_connection_limit_is_told_to_wait_or_raise_it(
    databases: Databases, dsn: str, limited_role: str
) -> None:
    """A database's own CONNECTION LIMIT holds for every role but superusers."""
    url = make_url(dsn)
    with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER ROLE {} CONNECTION LIMIT -1").format(sql.Identifier(limited_role))
        )
        admin.execute(
            sql.SQL("ALTER DATABASE {} CONNECTION LIMIT 0").format(sql.Identifier(url.database))
        )
    as_role = url.set(username=limited_role, password=None)
    result = mqstore("db", "check", "--dsn", as_role.render_as_string(hide_password=False))
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "too many connections for database" in last, last
    assert f"database {url.database!r} has used up its CONNECTION LIMIT" in last, last
    assert "ALTER DATABASE" in last and "is the server running" not in last, last


@pytest.mark.parametrize(
    "refusal",
    [
        "sorry, too many clients already",
        "remaining connection slots are reserved for non-replication superuser connections",
        "remaining connection slots are reserved for roles with the SUPERUSER attribute",
    ],
)
def test_a_server_past_its_max_connections_is_named_as_such(refusal: str) -> None:
    """PostgreSQL's words (15 and 16) when max_connections is used up, as libpq gives them
    (with no SQLSTATE) on connecting."""
    error = psycopg.OperationalError(
        f'connection failed: connection to server at "db", port 5432 failed: FATAL:  {refusal}'
    )
    said = describe_connect_error(error, parse_dsn("postgresql://broker@db/activemq"))
    assert "the server's max_connections is used up" in said, said
    assert "raise max_connections" in said and "up to 16 connections" in said, said
    assert "is the server running" not in said, said
