"""`mqstore db check` says which command mends what it lists: `db upgrade` for a database
behind head, `db adopt` for ActiveMQ's tables not taken over yet (never a backup for
either), the statement that makes a missing index of mqstore's own, and that the DSN's
search_path names no schema when it does not."""

from __future__ import annotations

from sqlalchemy.engine import Engine, make_url

from mqstore import migrate
from tests.conftest import load_activemq_fixture
from tests.integration.test_cli import mqstore

_BACKUP = "from a backup"


def test_db_check_behind_head_says_to_upgrade_not_to_restore(dsn: str, engine: Engine) -> None:
    migrate.downgrade(engine, "", migrate.known_revisions()[0])
    check = mqstore("db", "check", "--dsn", dsn)
    assert check.returncode == 1, check.stderr
    lines = check.stderr.strip().splitlines()
    assert "run `mqstore db upgrade`" in lines[0], lines
    assert _BACKUP not in check.stderr and "no migration mends" not in check.stderr
    assert "then run `mqstore db check` again" in lines[-1], lines


def test_db_check_on_activemq_tables_not_adopted_says_to_adopt_not_to_restore(
    empty_dsn: str, empty_engine: Engine
) -> None:
    load_activemq_fixture(empty_engine)
    check = mqstore("db", "check", "--dsn", empty_dsn)
    assert check.returncode == 1, check.stderr
    assert "run `mqstore db adopt`" in check.stderr.splitlines()[0], check.stderr
    assert _BACKUP not in check.stderr and "no migration mends" not in check.stderr


def test_db_check_at_head_on_a_dropped_index_of_mqstores_own_names_its_create_index(
    dsn: str, engine: Engine
) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP INDEX activemq_msgs_cpidx")
    check = mqstore("db", "check", "--dsn", dsn)
    assert check.returncode == 1, check.stderr
    statement = (
        "CREATE INDEX activemq_msgs_cpidx ON activemq_msgs (container, (- priority), id) "
        "WHERE xid IS NULL"
    )
    assert f"- index activemq_msgs_cpidx on activemq_msgs is missing: {statement}" in (check.stderr)
    assert "ActiveMQ's DDL" not in check.stderr
    with engine.begin() as conn:  # the statement named makes the index check asks for
        conn.exec_driver_sql(statement)
    assert mqstore("db", "check", "--dsn", dsn).returncode == 0


def test_db_check_with_a_search_path_naming_no_schema_says_so(dsn: str) -> None:
    nowhere = make_url(dsn).update_query_dict({"options": "-csearch_path=nosuch"})
    check = mqstore("db", "check", "--dsn", nowhere.render_as_string(hide_password=False))
    assert check.returncode == 1, check.stderr
    [line] = check.stderr.strip().splitlines()
    assert "search_path (nosuch) names no schema that exists" in line, line
    assert "schema None" not in line and "is missing" not in line, line
