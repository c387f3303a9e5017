"""Migrations from zero equal the declared schema and ActiveMQ 5.17's column contract."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore import migrate, takeover
from mqstore.errors import NotActiveMQSchemaError, SchemaError, SchemaVersionError
from mqstore.schema import build_schema
from mqstore.store import PostgresStore, SubscriptionKey
from tests.conftest import FIXTURES, REPO, count_rows, load_activemq_fixture
from tests.migrations.alembic_cli import alembic


def _columns(engine: Engine, table: str) -> dict[str, tuple[str, bool, str | None]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT column_name, data_type, character_maximum_length, is_nullable, "
                "column_default FROM information_schema.columns WHERE table_name = :t"
            ),
            {"t": table},
        ).all()
    return {r[0]: (f"{r[1]}({r[2]})" if r[2] else r[1], r[3] == "YES", r[4]) for r in rows}


def _fixture_columns() -> dict[str, dict[str, tuple[str, bool, str | None]]]:
    """Parse ActiveMQ's own CREATE TABLEs from the fixture dump."""
    text = (FIXTURES / "schema.sql").read_text()
    out: dict[str, dict[str, tuple[str, bool, str | None]]] = {}
    for table, body in re.findall(r"CREATE TABLE public\.(\w+) \((.*?)\n\);", text, re.S):
        cols: dict[str, tuple[str, bool, str | None]] = {}
        for line in body.strip().splitlines():
            m = re.match(r'\s*"?(\w+)"? (bigint|bytea|character varying\((\d+)\))(.*?),?$', line)
            assert m, line
            kind = m.group(2).replace("character varying", "character varying")
            default = re.search(r"DEFAULT (\S+)", m.group(4))
            cols[m.group(1)] = (kind, "NOT NULL" not in m.group(4), default and default.group(1))
        out[table] = cols
    return out


def test_upgrade_from_zero_matches_declared_schema(empty_engine: Engine) -> None:
    migrate.upgrade(empty_engine)
    assert migrate.check(empty_engine) == []


def test_upgrade_yields_activemq_column_contract(empty_engine: Engine) -> None:
    migrate.upgrade(empty_engine)
    for table, want in _fixture_columns().items():
        got = _columns(empty_engine, table)
        assert set(got) == set(want), table
        for name, (kind, nullable, default) in want.items():
            assert got[name][0] == kind, (table, name)
            assert got[name][1] == nullable, (table, name)
            assert (got[name][2] or None) == default, (table, name)


def test_keys_indexes_and_lock_row(empty_engine: Engine) -> None:
    migrate.upgrade(empty_engine)
    insp = sa.inspect(empty_engine)
    pk = insp.get_pk_constraint("activemq_acks")
    assert pk["constrained_columns"] == ["container", "client_id", "sub_name", "priority"]
    assert pk["name"] == "activemq_acks_pkey"
    msgs_idx = {i["name"]: i["column_names"] for i in insp.get_indexes("activemq_msgs")}
    # ActiveMQ's own indexes, exactly as in the fixture dump:
    for name, cols in re.findall(
        r"CREATE INDEX (activemq_msgs_\w+) ON public.activemq_msgs USING btree \(([^)]*)\)",
        (FIXTURES / "schema.sql").read_text(),
    ):
        assert msgs_idx[name] == [c.strip() for c in cols.split(",")]
    with empty_engine.connect() as conn:
        assert conn.execute(sa.text("SELECT id, time, broker_name FROM activemq_lock")).all() == [
            (1, None, None)
        ]


def test_downgrade_to_base_leaves_no_table(empty_engine: Engine) -> None:
    migrate.upgrade(empty_engine)
    migrate.downgrade(empty_engine)
    tables = set(sa.inspect(empty_engine).get_table_names())
    assert tables <= {"mqstore_version"}
    with empty_engine.connect() as conn:
        assert migrate.current_revision(conn) is None


def test_upgrade_downgrade_upgrade_is_clean(empty_engine: Engine) -> None:
    migrate.upgrade(empty_engine)
    migrate.downgrade(empty_engine)
    migrate.upgrade(empty_engine)
    assert migrate.check(empty_engine) == []


def test_two_prefixes_coexist(empty_engine: Engine) -> None:
    migrate.upgrade(empty_engine, prefix="BRK1_")
    migrate.upgrade(empty_engine, prefix="BRK2_")
    migrate.upgrade(empty_engine)
    for prefix in ("BRK1_", "BRK2_", ""):
        assert migrate.check(empty_engine, prefix) == []
    tables = set(sa.inspect(empty_engine).get_table_names())
    assert {"brk1_activemq_msgs", "brk2_activemq_acks", "activemq_lock"} <= tables
    migrate.downgrade(empty_engine, prefix="BRK1_")
    assert "brk1_activemq_msgs" not in set(sa.inspect(empty_engine).get_table_names())
    assert migrate.check(empty_engine, "BRK2_") == []


def test_check_lists_each_difference(empty_engine: Engine) -> None:
    migrate.upgrade(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(sa.text("DROP INDEX activemq_msgs_cpidx"))
        conn.execute(sa.text("ALTER TABLE activemq_acks ADD COLUMN extra int"))
    problems = migrate.check(empty_engine)
    assert any("activemq_msgs_cpidx" in p and "missing" in p for p in problems)
    assert any("activemq_acks.extra" in p for p in problems)


def test_check_reports_missing_schema(empty_engine: Engine) -> None:
    problems = migrate.check(empty_engine)
    assert any("mqstore db upgrade" in p for p in problems)
    with empty_engine.connect() as conn, pytest.raises(SchemaVersionError):
        migrate.require_head(conn)


def test_adopt_activemq_fixture_keeps_every_row(empty_engine: Engine) -> None:
    load_activemq_fixture(empty_engine)
    with empty_engine.connect() as conn:
        before = {
            t: conn.execute(sa.text(f"SELECT * FROM {t} ORDER BY 1, 2")).all()
            for t in ("activemq_msgs", "activemq_acks", "activemq_lock")
        }
    report = takeover.adopt(empty_engine)
    assert report.rows == {"activemq_msgs": 17, "activemq_acks": 2, "activemq_lock": 1}
    assert not [a for a in report.actions if "prioritizedMessages" in a]  # it ran plain
    with empty_engine.connect() as conn:
        for table, rows in before.items():
            assert conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY 1, 2")).all() == rows
    assert migrate.check(empty_engine) == []


def test_upgrade_refuses_unadopted_activemq_tables(empty_engine: Engine) -> None:
    load_activemq_fixture(empty_engine)
    with pytest.raises(SchemaError, match="mqstore db adopt"):
        migrate.upgrade(empty_engine)


def test_adopt_refuses_non_activemq_tables_and_changes_nothing(empty_engine: Engine) -> None:
    with empty_engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE activemq_msgs (id int primary key, body text)"))
        conn.execute(sa.text("INSERT INTO activemq_msgs VALUES (1, 'x')"))
    with pytest.raises(NotActiveMQSchemaError, match="nothing was changed"):
        takeover.adopt(empty_engine)
    assert set(sa.inspect(empty_engine).get_table_names()) == {"activemq_msgs"}
    assert count_rows(empty_engine, "activemq_msgs") == 1


def test_adopt_refuses_an_empty_database(empty_engine: Engine) -> None:
    with pytest.raises(NotActiveMQSchemaError, match="mqstore db upgrade"):
        takeover.adopt(empty_engine)


def test_alembic_cli_from_repo_root(empty_dsn: str) -> None:
    env = {"MQSTORE_DSN": empty_dsn, "PATH": "/usr/bin:/bin"}
    alembic = [sys.executable, "-m", "alembic"]
    up = subprocess.run(
        [*alembic, "upgrade", "head"], cwd=REPO, env=env, capture_output=True, check=False
    )
    assert up.returncode == 0, up.stderr.decode()
    engine = sa.create_engine(empty_dsn.replace("postgresql://", "postgresql+psycopg://"))
    try:
        assert migrate.check(engine) == []
        down = subprocess.run(
            [*alembic, "-x", f"dsn={empty_dsn}", "downgrade", "base"],
            cwd=REPO,
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            check=False,
        )
        assert down.returncode == 0, down.stderr.decode()
        assert build_schema().msgs.name not in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE activemq_msgs DROP CONSTRAINT activemq_msgs_pkey",
        "ALTER TABLE activemq_acks ALTER COLUMN priority SET DEFAULT 0",
        "INSERT INTO activemq_lock (id) VALUES (2)",
    ],
    ids=["no-msgs-key", "acks-default", "second-lock-row"],
)
def test_adopt_refuses_what_it_cannot_make_pass_check_and_changes_nothing(
    empty_engine: Engine, change: str
) -> None:
    load_activemq_fixture(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(sa.text(change))
    tables_before = set(sa.inspect(empty_engine).get_table_names())
    with pytest.raises(NotActiveMQSchemaError, match="nothing was changed"):
        takeover.adopt(empty_engine)
    assert set(sa.inspect(empty_engine).get_table_names()) == tables_before
    assert count_rows(empty_engine, "activemq_msgs") == 17


def test_check_reports_a_history_id_that_lost_its_identity(empty_engine: Engine) -> None:
    migrate.upgrade(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE mqstore_history ALTER hist_id DROP IDENTITY"))
    assert "mqstore_history.hist_id should be an identity column" in migrate.check(empty_engine)


@pytest.mark.parametrize("prefix", ["Brk1_", "x", "A" * 30 + "_"], ids=["mixed-case", "one", "max"])
def test_every_usable_prefix_migrates_from_zero_to_the_declared_schema(
    empty_engine: Engine, prefix: str
) -> None:
    migrate.upgrade(empty_engine, prefix)
    assert migrate.check(empty_engine, prefix) == []
    assert migrate.check(empty_engine, prefix.upper()) == []  # ActiveMQ folds names: one set
    names = {t.lower() for t in build_schema(prefix).metadata.tables}
    assert names <= set(sa.inspect(empty_engine).get_table_names())
    migrate.downgrade(empty_engine, prefix)
    assert not names & set(sa.inspect(empty_engine).get_table_names())


def test_alembic_cli_from_another_directory_uses_this_checkout(
    empty_dsn: str, tmp_path: Path
) -> None:
    """The environment imports mqstore; it must be the one beside these migrations, not
    whichever an installed package or the current directory provides."""
    config = str(REPO / "alembic.ini")
    up = alembic("-c", config, "-x", f"dsn={empty_dsn}", "upgrade", "head", cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    engine = sa.create_engine(empty_dsn.replace("postgresql://", "postgresql+psycopg://"))
    try:
        assert migrate.check(engine) == []
    finally:
        engine.dispose()


def test_alembic_cli_upgrade_beside_another_prefixs_tables_says_what_it_made(
    empty_dsn: str,
) -> None:
    """A forgotten ``-x prefix=`` makes a new, empty set of tables: alembic's own upgrade
    says so too, naming the prefix the broker's tables have and the downgrade that drops
    the empty set."""
    first = alembic("-x", f"dsn={empty_dsn}", "-x", "prefix=BRK1_", "upgrade", "head")
    assert first.returncode == 0 and "note:" not in first.stderr, first.stderr
    forgot = alembic("-x", f"dsn={empty_dsn}", "upgrade", "head")
    assert forgot.returncode == 0, forgot.stderr
    [note] = [line for line in forgot.stderr.splitlines() if line.startswith("note:")]
    assert note == (
        "note: made a new, empty set of tables (-x prefix='') beside the tables of prefix "
        "'BRK1_' in this schema; if the broker's messages are in those, give -x prefix=BRK1_ "
        "(or MQSTORE_TABLE_PREFIX) to every command, and `alembic -x dsn=... -x prefix='' "
        "downgrade base` drops the empty set"
    )
    again = alembic("-x", f"dsn={empty_dsn}", "upgrade", "head")
    assert again.returncode == 0 and "note:" not in again.stderr, again.stderr


def test_adopt_gives_rows_without_a_priority_the_0_activemq_writes(empty_engine: Engine) -> None:
    """Rows a broker before ActiveMQ 5.4 wrote have no PRIORITY; once adopted, mqstore
    delivers them (queue and durable subscription) instead of counting them forever."""
    load_activemq_fixture(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(sa.text("UPDATE activemq_msgs SET priority = NULL WHERE id IN (2, 3, 8)"))
    report = takeover.adopt(empty_engine)
    assert "activemq_msgs: PRIORITY 0 given to 3 row(s) that had none" in report.actions
    store = PostgresStore(empty_engine, cleanup_interval_s=0)
    store.start()
    try:
        queue = [m.id for m in store.page("queue://FIXTURE.Q", None, 100)]
        assert queue == [1, 2, 3, 4, 5, 6, *range(12, 18)]
        sub = SubscriptionKey("topic://FIXTURE.T", "fix-sub-b", "subB")
        assert [m.id for m in store.page_subscription(sub, None, 100)] == [7, 8, 9, 10, 11]
        assert store.pending_count(sub) == 5
    finally:
        store.stop()
    assert migrate.check(empty_engine) == []


def test_adopt_says_when_activemq_stored_priorities_and_which_setting_follows_them(
    empty_engine: Engine,
) -> None:
    """Rows ActiveMQ stored with prioritizedMessages (a PRIORITY other than 0) are noted with
    the setting that delivers by priority; a plain store still delivers every one of them."""
    load_activemq_fixture(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(sa.text("UPDATE activemq_msgs SET priority = 7 WHERE id IN (8, 10)"))
    [note] = [a for a in takeover.adopt(empty_engine).actions if "prioritizedMessages" in a]
    assert "MQSTORE_PRIORITIZED_MESSAGES=true" in note
    assert "--prioritized-messages" in note
    store = PostgresStore(empty_engine, cleanup_interval_s=0)
    store.start()
    try:
        sub = SubscriptionKey("topic://FIXTURE.T", "fix-sub-b", "subB")
        assert [m.id for m in store.page_subscription(sub, None, 100)] == [7, 8, 9, 10, 11]
    finally:
        store.stop()
