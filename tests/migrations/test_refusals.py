"""What `db upgrade` and `db adopt` say when the database refuses them or holds tables they
did not make: one line that names the fix, and nothing changed."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from mqstore import migrate, takeover
from mqstore.db import create_engine
from mqstore.errors import ConfigError, SchemaError
from mqstore.migration_guards import BROKER_PRIVILEGES
from tests.conftest import Databases, count_rows, load_activemq_fixture, scratch_role
from tests.integration.test_cli import mqstore
from tests.migrations.alembic_cli import alembic


def _tables(engine: Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


@pytest.mark.parametrize(
    "ddl",
    [
        "CREATE TABLE activemq_lock (id bigint PRIMARY KEY, time bigint, "
        "broker_name varchar(250)); INSERT INTO activemq_lock (id) VALUES (1)",
        "CREATE TABLE mqstore_history (x int)",
    ],
    ids=["activemq-lock-alone", "a-table-of-another-tool"],
)
def test_upgrade_refuses_tables_it_never_made_and_changes_nothing(
    empty_engine: Engine, ddl: str
) -> None:
    with empty_engine.begin() as conn:
        conn.exec_driver_sql(ddl)
    before = _tables(empty_engine)
    with pytest.raises(SchemaError, match=r"never migrated .* nothing was changed: drop"):
        migrate.upgrade(empty_engine)
    assert _tables(empty_engine) == before


@pytest.fixture
def role(databases: Databases, empty_dsn: str, empty_engine: Engine) -> Iterator[str]:
    """A role without CREATE on the test database's schema, dropped afterwards."""
    with scratch_role(databases, empty_dsn, "NoRights") as name:  # mixed case: quoted in SQL
        try:
            yield name
        finally:
            empty_engine.dispose()


def _as_role(empty_dsn: str, role: str) -> Engine:
    """An engine on the test database whose sessions run as ``role``."""
    url = make_url(empty_dsn).update_query_dict({"options": f"-crole={role}"})
    return create_engine(url.render_as_string(hide_password=False))


def test_upgrade_without_create_rights_says_so(empty_dsn: str, role: str) -> None:
    engine = _as_role(empty_dsn, role)
    try:
        with pytest.raises(SchemaError, match=r"refused .*permission denied.*owner"):
            migrate.upgrade(engine)
        assert _tables(engine) == set()
    finally:
        engine.dispose()


def test_adopt_by_the_brokers_role_says_who_may(
    empty_dsn: str, empty_engine: Engine, role: str
) -> None:
    load_activemq_fixture(empty_engine)
    with empty_engine.begin() as conn:  # what a broker's role holds: rows, not tables
        conn.execute(
            sa.text(
                f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"'
            )
        )
    engine = _as_role(empty_dsn, role)
    try:
        with pytest.raises(SchemaError, match=r"`mqstore db adopt` was refused .*owner of"):
            takeover.adopt(engine)
    finally:
        engine.dispose()
    assert _tables(empty_engine) == {"activemq_msgs", "activemq_acks", "activemq_lock"}
    assert count_rows(empty_engine, "activemq_msgs") == 17


def test_upgrade_with_a_search_path_of_no_schema_says_so(empty_dsn: str) -> None:
    url = make_url(empty_dsn).update_query_dict({"options": "-csearch_path=nosuch"})
    engine = create_engine(url.render_as_string(hide_password=False))
    try:
        with pytest.raises(SchemaError, match="search_path names no existing schema"):
            migrate.upgrade(engine)
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "prefix",
    ['BRK"1_', "BRK 1_", "1BRK_", "B" * 50 + "_"],
    ids=["quote", "space", "digit-first", "over-63-with-table-names"],
)
def test_alembic_cli_refuses_an_unusable_prefix_in_one_line(empty_dsn: str, prefix: str) -> None:
    result = alembic("-x", f"dsn={empty_dsn}", "-x", f"prefix={prefix}", "upgrade", "head")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "must start with a letter" in result.stderr.strip().splitlines()[-1]
    engine = create_engine(empty_dsn)
    try:
        assert _tables(engine) == set()
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("where", "words"),
    [
        ({"port": 1}, "cannot connect to PostgreSQL at 127.0.0.1:1"),
        ({"database": "mqs_no_such_database"}, "database 'mqs_no_such_database' does not exist"),
    ],
    ids=["no-server", "no-database"],
)
def test_alembic_cli_on_a_database_it_cannot_reach_says_so_in_one_line(
    empty_dsn: str, where: dict[str, object], words: str
) -> None:
    url = make_url(empty_dsn).set(**where)
    if "port" in where:
        url = url.set(host="127.0.0.1")
    result = alembic("-x", f"dsn={url.render_as_string(hide_password=False)}", "upgrade", "head")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    assert words in result.stderr.strip().splitlines()[-1]


def _migration_state(engine: Engine) -> tuple[set[str], str | None]:
    with engine.connect() as conn:
        return _tables(engine), migrate.current_revision(conn)


@pytest.mark.parametrize("command", ["upgrade", "downgrade"])
@pytest.mark.parametrize(
    ("refusal", "words"),
    [("no-rights", "run it as the owner of the tables"), ("read-only", "DSN at the primary")],
    ids=["no-rights", "read-only"],
)
def test_alembic_cli_refused_by_the_database_says_so_in_one_line(
    request: pytest.FixtureRequest,
    empty_dsn: str,
    empty_engine: Engine,
    command: str,
    refusal: str,
    words: str,
) -> None:
    """As `mqstore db upgrade` does: a role without CREATE (or a broker's role, which may
    use the tables but not drop them), or a read-only database."""
    if command == "downgrade":
        migrate.upgrade(empty_engine)
    options = "-cdefault_transaction_read_only=on"
    if refusal == "no-rights":
        role = request.getfixturevalue("role")
        with empty_engine.begin() as conn:
            privileges = ", ".join(BROKER_PRIVILEGES)
            conn.execute(sa.text(f'GRANT {privileges} ON ALL TABLES IN SCHEMA public TO "{role}"'))
        options = f"-crole={role}"
    before = _migration_state(empty_engine)
    url = make_url(empty_dsn).update_query_dict({"options": options})
    target = "head" if command == "upgrade" else "base"
    result = alembic("-x", f"dsn={url.render_as_string(hide_password=False)}", command, target)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"`alembic {command}` was refused by the database" in last and words in last, last
    assert _migration_state(empty_engine) == before


def test_upgrade_refuses_an_unusable_prefix(empty_engine: Engine) -> None:
    with pytest.raises(ConfigError, match="at most 31 characters"):
        migrate.upgrade(empty_engine, prefix="B" * 50 + "_")
    assert _tables(empty_engine) == set()


def test_upgrade_after_downgrade_to_base_refuses_tables_activemq_made_since(
    empty_engine: Engine,
) -> None:
    migrate.upgrade(empty_engine)
    migrate.downgrade(empty_engine)  # keeps an empty version table
    load_activemq_fixture(empty_engine)  # an ActiveMQ broker started on the database meanwhile
    with pytest.raises(SchemaError, match="run `mqstore db adopt` first"):
        migrate.upgrade(empty_engine)
    assert count_rows(empty_engine, "activemq_msgs") == 17
    takeover.adopt(empty_engine)
    assert migrate.check(empty_engine) == []


def test_upgrade_refuses_a_stray_table_of_a_later_revision(empty_engine: Engine) -> None:
    migrate.upgrade(empty_engine, revision="0001")
    with empty_engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE mqstore_journal (x int)"))
    with pytest.raises(SchemaError, match=r"already exists.*nothing was changed: mqstore did"):
        migrate.upgrade(empty_engine)
    with empty_engine.connect() as conn:
        assert migrate.current_revision(conn) == "0001"


def test_alembic_cli_upgrade_refuses_activemq_tables_in_one_line(empty_dsn: str) -> None:
    engine = create_engine(empty_dsn)
    try:
        load_activemq_fixture(engine)
        result = alembic("-x", f"dsn={empty_dsn}", "upgrade", "head")
        assert result.returncode != 0
        assert "Traceback" not in result.stderr
        assert "`mqstore db adopt`" in result.stderr.strip().splitlines()[-1]
        assert _tables(engine) == {"activemq_msgs", "activemq_acks", "activemq_lock"}
    finally:
        engine.dispose()


def test_a_brokers_role_granted_before_adopt_is_told_the_grant_it_lacks(
    empty_dsn: str, empty_engine: Engine, role: str
) -> None:
    load_activemq_fixture(empty_engine)
    grant = f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"'
    with empty_engine.begin() as conn:  # as for ActiveMQ: the broker's role may use its tables
        conn.execute(sa.text(grant))
    takeover.adopt(empty_engine)  # by the owner: mqstore's tables come after the grant
    engine = _as_role(empty_dsn, role)
    try:
        with engine.connect() as conn, pytest.raises(SchemaError) as refused:
            migrate.require_head(conn)
        assert str(refused.value) == (
            f'the database role "{role}" lacks SELECT on mqstore_version: as the tables\' owner '
            f"run {grant}"
        )
        with empty_engine.begin() as conn:
            conn.execute(sa.text(f'GRANT SELECT ON mqstore_version TO "{role}"'))
        with engine.connect() as conn, pytest.raises(SchemaError, match="on mqstore_journal"):
            migrate.require_head(conn)
        with empty_engine.begin() as conn:
            conn.execute(sa.text(grant))
        with engine.connect() as conn:
            migrate.require_head(conn)
    finally:
        engine.dispose()


def test_adopt_of_a_prefix_whose_acks_activemq_could_not_create_says_how(
    empty_engine: Engine,
) -> None:
    load_activemq_fixture(empty_engine)  # its ACKS key is pk_activemq_acks
    with empty_engine.begin() as conn:  # what a second ActiveMQ, tablePrefix BRK2_, gets
        for table in ("msgs", "lock"):
            conn.execute(
                sa.text(
                    f"CREATE TABLE brk2_activemq_{table} (LIKE activemq_{table}, PRIMARY KEY (id))"
                )
            )
        conn.execute(sa.text("INSERT INTO brk2_activemq_lock (id) VALUES (1)"))
    with pytest.raises(SchemaError) as refused:
        takeover.adopt(empty_engine, "BRK2_")
    assert str(refused.value).startswith(
        "table brk2_activemq_acks is missing, nothing was changed: ActiveMQ could not create "
        "it because activemq_acks's key already holds the name pk_activemq_acks"
    )
    assert "Run `mqstore db adopt` first" in str(refused.value)
    assert "brk2_mqstore_version" not in _tables(empty_engine)
    takeover.adopt(empty_engine)  # then what the message says frees the name
    with empty_engine.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE brk2_activemq_acks (container varchar(250) NOT NULL, "
                "sub_dest varchar(250), client_id varchar(250) NOT NULL, "
                "sub_name varchar(250) NOT NULL, selector varchar(250), last_acked_id bigint, "
                "priority bigint DEFAULT 5 NOT NULL, xid varchar(250), "
                "CONSTRAINT pk_activemq_acks PRIMARY KEY (container, client_id, sub_name))"
            )
        )
    takeover.adopt(empty_engine, "BRK2_")
    assert migrate.check(empty_engine, "BRK2_") == []


def test_adopt_refuses_while_a_broker_holds_the_row_lock(
    empty_dsn: str, activemq_engine: Engine
) -> None:
    """Adopt rewrites ACKS's key and indexes MSGS: not under a live ActiveMQ master."""
    with activemq_engine.connect() as holder:  # ActiveMQ's database locker, as a master holds it
        holder.execute(sa.text("SELECT * FROM activemq_lock WHERE id = 1 FOR UPDATE"))
        result = mqstore("db", "adopt", "--dsn", empty_dsn)
        holder.rollback()
    _refused_and_unchanged(result, activemq_engine)
    assert "activemq_lock is locked by a running broker" in result.stderr
    assert "nothing was changed: stop that broker first" in result.stderr


def test_adopt_refuses_while_a_broker_holds_the_lease(
    empty_dsn: str, activemq_engine: Engine
) -> None:
    """ActiveMQ's lease locker takes no database lock: its lease in the row is what tells."""
    with activemq_engine.begin() as conn:
        lease_end = int(time.time() * 1000) + 60_000
        conn.execute(
            sa.text("UPDATE activemq_lock SET broker_name = 'amq-master', time = :t"),
            {"t": lease_end},
        )
    result = mqstore("db", "adopt", "--dsn", empty_dsn)
    _refused_and_unchanged(result, activemq_engine)
    assert "held by amq-master" in result.stderr
    assert "once the lease has run out" in result.stderr


def _refused_and_unchanged(result: subprocess.CompletedProcess[str], engine: Engine) -> None:
    """Adopt exited 2 with one line, and left ActiveMQ's tables as they were."""
    assert result.returncode == 2, result.stdout
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert _tables(engine) == {"activemq_msgs", "activemq_acks", "activemq_lock"}
    with engine.connect() as conn:
        assert sa.inspect(conn).get_pk_constraint("activemq_acks")["name"] == "pk_activemq_acks"
        indexes = sa.inspect(conn).get_indexes("activemq_msgs")
    assert "activemq_msgs_uidx" not in {index["name"] for index in indexes}


def test_adopt_names_the_schema_it_looked_in(empty_dsn: str, empty_engine: Engine) -> None:
    load_activemq_fixture(empty_engine)  # in public, where ActiveMQ's default JDBC URL puts it
    with empty_engine.begin() as conn:
        conn.execute(sa.text("CREATE SCHEMA amq"))
    url = make_url(empty_dsn).update_query_dict({"options": "-csearch_path=amq"})
    engine = create_engine(url.render_as_string(hide_password=False))
    try:
        with pytest.raises(SchemaError, match="in schema amq, the first of the DSN's search_path"):
            takeover.adopt(engine)
    finally:
        engine.dispose()
    assert count_rows(empty_engine, "activemq_msgs") == 17


def test_a_store_start_on_the_wrong_schema_names_it(dsn: str, engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE SCHEMA amq"))
    url = make_url(dsn).update_query_dict({"options": "-csearch_path=amq"})
    elsewhere = create_engine(url.render_as_string(hide_password=False))
    try:
        with elsewhere.connect() as conn, pytest.raises(SchemaError, match="in schema amq: run"):
            migrate.require_head(conn)
    finally:
        elsewhere.dispose()


def test_upgrade_on_a_read_only_database_says_so(empty_dsn: str) -> None:
    url = make_url(empty_dsn).update_query_dict(
        {"options": "-cdefault_transaction_read_only=on"}  # as on a hot standby
    )
    engine = create_engine(url.render_as_string(hide_password=False))
    try:
        with pytest.raises(SchemaError, match=r"read-only .* point the DSN at the primary"):
            migrate.upgrade(engine)
        assert _tables(engine) == set()
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("lock_timeout=200", "lock timeout.* another session holds a lock"),
        ("statement_timeout=200", "statement timeout.* longer one"),
    ],
    ids=["lock_timeout", "statement_timeout"],
)
def test_adopt_past_a_timeout_of_the_role_says_which_and_changes_nothing(
    empty_dsn: str, empty_engine: Engine, setting: str, words: str
) -> None:
    load_activemq_fixture(empty_engine)
    url = make_url(empty_dsn).update_query_dict({"options": f"-c{setting}"})
    engine = create_engine(url.render_as_string(hide_password=False))
    try:
        with empty_engine.connect() as holder:  # a session in the middle of using ACKS
            holder.execute(sa.text("LOCK TABLE activemq_acks IN ACCESS SHARE MODE"))
            with pytest.raises(SchemaError, match=words):
                takeover.adopt(engine)
            holder.rollback()
    finally:
        engine.dispose()
    assert _tables(empty_engine) == {"activemq_msgs", "activemq_acks", "activemq_lock"}
    with empty_engine.connect() as conn:
        pk = sa.inspect(conn).get_pk_constraint("activemq_acks")
    assert pk["name"] == "pk_activemq_acks"
