"""A migration run by a role that does not own mqstore's tables is refused by PostgreSQL:
only their owner may alter or drop them, whatever the role is granted (CREATE on the
schema included), and the refusal says so; a role that may not create tables in the schema
is told how to be given that right."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Engine, make_url

from mqstore.db import libpq_dsn
from mqstore.migration_guards import BROKER_PRIVILEGES
from tests.conftest import Databases
from tests.integration.test_cli import mqstore

_roles = itertools.count()


@pytest.fixture
def granted_role(databases: Databases, dsn: str, engine: Engine) -> Iterator[str]:
    """A role granted a broker's rights on the tables and CREATE on their schema, but not
    owning them; dropped afterwards."""
    name = f"mqs_t{os.getpid()}_granted_{next(_roles)}"
    with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                f"GRANT {', '.join(BROKER_PRIVILEGES)} ON ALL TABLES IN SCHEMA public TO {name}"
            )
        )
        conn.execute(sa.text(f"GRANT CREATE, USAGE ON SCHEMA public TO {name}"))
    try:
        yield name
    finally:
        engine.dispose()
        with psycopg.connect(libpq_dsn(dsn), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _as(dsn: str, role: str) -> str:
    url = make_url(dsn).update_query_dict({"options": f"-crole={role}"})
    return url.render_as_string(hide_password=False)


def test_a_downgrade_by_a_role_granted_create_but_not_owning_the_tables_names_the_owner(
    dsn: str, engine: Engine, granted_role: str
) -> None:
    result = mqstore("db", "downgrade", "base", "--yes", "--dsn", _as(dsn, granted_role))
    assert result.returncode != 0, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "must be owner of" in last, last
    assert "only the owner of the tables" in last and "run it as the owner" in last, last
    assert "granted CREATE" not in last, last
    assert "activemq_msgs" in sa.inspect(engine).get_table_names()


def test_an_upgrade_by_a_role_that_may_not_create_tables_is_told_how_to_grant_it(
    databases: Databases, empty_dsn: str
) -> None:
    name = f"mqs_t{os.getpid()}_nocreate_{next(_roles)}"
    with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
    try:
        result = mqstore("db", "upgrade", "--dsn", _as(empty_dsn, name))
    finally:
        with psycopg.connect(libpq_dsn(empty_dsn), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
    assert result.returncode != 0, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "permission denied for schema" in last, last
    assert "may not create tables in that schema" in last and "GRANT CREATE ON SCHEMA" in last
