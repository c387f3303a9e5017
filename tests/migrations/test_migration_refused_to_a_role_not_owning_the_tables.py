"""A migration run by a role that does not own mqstore's tables is refused by PostgreSQL:
only their owner may alter or drop them, whatever the role is granted (CREATE on the
schema included), and the refusal says so; a role that may not create tables in the schema
is told how to be given that right."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.migration_guards import BROKER_PRIVILEGES
from tests.conftest import Databases, as_role, scratch_role
from tests.integration.test_cli import mqstore


@pytest.fixture
def granted_role(databases: Databases, dsn: str, engine: Engine) -> Iterator[str]:
    """A role granted a broker's rights on the tables and CREATE on their schema, but not
    owning them; dropped afterwards."""
    grants = (
        f"GRANT {', '.join(BROKER_PRIVILEGES)} ON ALL TABLES IN SCHEMA public TO {{role}}",
        "GRANT CREATE, USAGE ON SCHEMA public TO {role}",
    )
    with scratch_role(databases, dsn, "granted", *grants) as name:
        try:
            yield name
        finally:
            engine.dispose()


def test_a_downgrade_by_a_role_granted_create_but_not_owning_the_tables_names_the_owner(
    dsn: str, engine: Engine, granted_role: str
) -> None:
    result = mqstore("db", "downgrade", "base", "--yes", "--dsn", as_role(dsn, granted_role))
    assert result.returncode != 0, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "must be owner of" in last, last
    assert "only the owner of the tables" in last and "run it as the owner" in last, last
    assert "granted CREATE" not in last, last
    assert "activemq_msgs" in sa.inspect(engine).get_table_names()


def test_an_upgrade_by_a_role_that_may_not_create_tables_is_told_how_to_grant_it(
    databases: Databases, empty_dsn: str
) -> None:
    with scratch_role(databases, empty_dsn, "nocreate") as name:
        result = mqstore("db", "upgrade", "--dsn", as_role(empty_dsn, name))
    assert result.returncode != 0, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "permission denied for schema" in last, last
    assert "may not create tables in that schema" in last and "GRANT CREATE ON SCHEMA" in last
