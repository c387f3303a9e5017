"""ActiveMQ's tables in ``public`` and a role with a schema of its own name (``"$user"``
comes first in the default search_path): mqstore would find ActiveMQ's tables through the
search_path but make its own (the version table, the journal's, the history's) in the
role's schema. `db adopt`, `db upgrade`, `db check` and `serve` refuse that, naming both
schemas and the search_path to give, and change nothing; tables split so already are
refused from either side, naming how to bring them together."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from tests.conftest import Databases, load_activemq_fixture, scratch_role
from tests.integration.test_cli import mqstore


def _where(engine: Engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        return [
            (str(schema), str(table))
            for schema, table in conn.execute(
                sa.text(
                    "SELECT schemaname, tablename FROM pg_tables WHERE tablename LIKE "
                    "'activemq%' OR tablename LIKE 'mqstore%' ORDER BY 1, 2"
                )
            )
        ]


@pytest.fixture
def own_schema_role(databases: Databases, empty_dsn: str, empty_engine: Engine) -> Iterator[str]:
    """ActiveMQ's tables (and rows) in public, owned by a role that has a schema of its own
    name; its name, dropped afterwards."""
    load_activemq_fixture(empty_engine)
    grants = (
        "CREATE SCHEMA {role} AUTHORIZATION {role}",
        "GRANT CREATE ON SCHEMA public TO {role}",
        *(
            f"ALTER TABLE {t} OWNER TO {{role}}"
            for t in ("activemq_msgs", "activemq_acks", "activemq_lock")
        ),
    )
    with scratch_role(databases, empty_dsn, "own", *grants) as name:
        try:
            yield name
        finally:
            empty_engine.dispose()


def _as(dsn: str, role: str, search_path: str | None = None) -> str:
    options = f"-crole={role}" + (f" -csearch_path={search_path}" if search_path else "")
    return make_url(dsn).update_query_dict({"options": options}).render_as_string(False)


@pytest.mark.parametrize(
    "args", [["db", "adopt"], ["db", "upgrade"], ["db", "check"]], ids=" ".join
)
def test_a_command_that_would_split_the_tables_across_schemas_refuses_naming_both(
    empty_dsn: str, empty_engine: Engine, own_schema_role: str, args: list[str]
) -> None:
    before = _where(empty_engine)
    result = mqstore(*args, "--dsn", _as(empty_dsn, own_schema_role))
    assert result.returncode == 2, (result.stdout, result.stderr)
    [line] = result.stderr.strip().splitlines()
    assert "tables activemq_acks, activemq_lock, activemq_msgs are in schema public" in line
    assert (
        f'current schema (the first of its search_path "$user", public that exists) is '
        f"{own_schema_role}" in line
    ), line
    assert "options=-csearch_path=public" in line, line
    assert _where(empty_engine) == before


def test_adopt_through_the_search_path_named_keeps_every_table_in_public(
    empty_dsn: str, empty_engine: Engine, own_schema_role: str
) -> None:
    adopt = mqstore("db", "adopt", "--dsn", _as(empty_dsn, own_schema_role, "public"))
    assert adopt.returncode == 0, adopt.stderr
    assert {schema for schema, _ in _where(empty_engine)} == {"public"}


def test_tables_split_already_are_refused_from_either_side_naming_how_to_join_them(
    empty_dsn: str, empty_engine: Engine, own_schema_role: str
) -> None:
    """As a run before this refusal left them: ActiveMQ's in public, mqstore's in the role's."""
    assert (
        mqstore("db", "adopt", "--dsn", _as(empty_dsn, own_schema_role, "public")).returncode == 0
    )
    with empty_engine.begin() as conn:
        for table in ("mqstore_version", "mqstore_journal", "mqstore_history"):
            conn.execute(sa.text(f'ALTER TABLE {table} SET SCHEMA "{own_schema_role}"'))
    before = _where(empty_engine)
    as_owner = mqstore("db", "adopt", "--dsn", empty_dsn)  # search_path public: "not adopted"
    assert as_owner.returncode == 2, (as_owner.stdout, as_owner.stderr)
    [line] = as_owner.stderr.strip().splitlines()
    assert f"are in schema {own_schema_role}, while activemq_msgs is in schema public" in line
    assert f"ALTER TABLE {own_schema_role}.NAME SET SCHEMA public" in line, line
    as_role = mqstore("db", "check", "--dsn", _as(empty_dsn, own_schema_role))
    assert as_role.returncode == 2, (as_role.stdout, as_role.stderr)
    [line] = as_role.stderr.strip().splitlines()
    assert "are in schema public" in line and f"is {own_schema_role}, which holds" in line
    assert _where(empty_engine) == before
