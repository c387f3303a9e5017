"""`mqstore serve` on tables changed by hand so that they refuse rows the broker writes (a
narrower column, a CHECK constraint, a trigger that raises, ...) refuses to start, in one
line naming each change and the statement that undoes it, and `mqstore db check` lists
the same changes. A journaled broker that started would acknowledge messages whose
checkpoint can never be written. Changes that refuse no write (an index added) do not
stop it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from mqstore.app import require_schema
from mqstore.drift import write_refusals
from mqstore.errors import SchemaError
from tests.integration.test_cli import mqstore

#: Hand-made changes that refuse the broker's writes: the DDL, and words of the line
#: naming the change and its undoing.
_REFUSING = {
    "column-narrowed": (
        "ALTER TABLE activemq_msgs ALTER COLUMN container TYPE varchar(40)",
        "activemq_msgs.container is VARCHAR(40), expected VARCHAR(250): ALTER TABLE "
        "activemq_msgs ALTER COLUMN container TYPE VARCHAR(250)",
    ),
    "column-integer": (
        "ALTER TABLE activemq_msgs ALTER COLUMN msgid_seq TYPE integer",
        "activemq_msgs.msgid_seq is INTEGER, expected BIGINT: ALTER TABLE activemq_msgs "
        "ALTER COLUMN msgid_seq TYPE BIGINT",
    ),
    "not-null": (
        "ALTER TABLE activemq_msgs ALTER COLUMN msgid_prod SET NOT NULL",
        "activemq_msgs.msgid_prod should be NULL: ALTER TABLE activemq_msgs ALTER COLUMN "
        "msgid_prod DROP NOT NULL",
    ),
    "check-constraint": (
        "ALTER TABLE activemq_msgs ADD CONSTRAINT short_names CHECK (length(container) < 30)",
        "activemq_msgs has CHECK constraint short_names (CHECK ((length((container)::text) "
        "< 30))), which is not part of the schema: ALTER TABLE activemq_msgs DROP CONSTRAINT "
        "short_names",
    ),
    "trigger": (
        "CREATE FUNCTION refuse_all() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN RAISE EXCEPTION 'audit table full'; END$$; "
        "CREATE TRIGGER audit BEFORE INSERT ON activemq_msgs FOR EACH ROW "
        "EXECUTE FUNCTION refuse_all()",
        "activemq_msgs has trigger audit (CREATE TRIGGER audit BEFORE INSERT ON "
        "public.activemq_msgs FOR EACH ROW EXECUTE FUNCTION refuse_all()), which is not part "
        "of the schema: DROP TRIGGER audit ON activemq_msgs",
    ),
    "rule": (
        "CREATE RULE drop_rows AS ON INSERT TO mqstore_history DO INSTEAD NOTHING",
        "mqstore_history has rule drop_rows (CREATE RULE drop_rows AS ON INSERT TO "
        "public.mqstore_history DO INSTEAD NOTHING), which is not part of the schema: "
        "DROP RULE drop_rows ON mqstore_history",
    ),
    "column-added-not-null": (
        "ALTER TABLE activemq_acks ADD COLUMN note text NOT NULL",
        "activemq_acks.note is not part of the schema: NOT NULL without a default, every "
        "insert fails: ALTER TABLE activemq_acks DROP COLUMN note",
    ),
    "unique-index-added": (
        "CREATE UNIQUE INDEX one_per_queue ON activemq_msgs (container)",
        "index one_per_queue on activemq_msgs is unique and not part of the schema, it "
        "refuses rows the broker writes",
    ),
    "referred-to": (
        "CREATE TABLE audit (id bigint REFERENCES activemq_msgs (id))",
        "activemq_msgs has a foreign key audit_id_fkey of table audit referring to it "
        "(FOREIGN KEY (id) REFERENCES activemq_msgs(id)), which is not part of the schema: "
        "ALTER TABLE audit DROP CONSTRAINT audit_id_fkey",
    ),
}


def _change(engine: Engine, ddl: str) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(ddl)


def _serve(dsn: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    """A journaled ``mqstore serve`` until it exits, as a refused one does at once (one
    that starts is ended by the timeout, which fails the test)."""
    return subprocess.run(
        [sys.executable, "-m", "mqstore", "serve", "--dsn", dsn, "--data-dir", str(data_dir),
         "--stomp", "127.0.0.1:0", "--journal", "--log-level", "ERROR"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("change", ["column-narrowed", "check-constraint", "trigger"])
def test_serve_refuses_tables_that_refuse_its_writes_naming_the_change_and_its_undoing(
    dsn: str, engine: Engine, tmp_path: Path, change: str
) -> None:
    ddl, words = _REFUSING[change]
    _change(engine, ddl)
    data_dir = tmp_path / "data"
    result = _serve(dsn, data_dir)
    assert result.returncode == 2, (result.stdout, result.stderr)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: the database schema differs from what mqstore expects")
    assert words in line and "run `mqstore db check`" in line, line
    assert not data_dir.exists()  # refused before the journal or the lease


@pytest.mark.parametrize("change", list(_REFUSING))
def test_db_check_lists_every_change_that_refuses_the_brokers_writes(
    dsn: str, engine: Engine, change: str
) -> None:
    ddl, words = _REFUSING[change]
    _change(engine, ddl)
    check = mqstore("db", "check", "--dsn", dsn)
    assert check.returncode == 1, (check.stdout, check.stderr)
    assert f"- {words}" in check.stderr
    with pytest.raises(SchemaError, match="the database schema differs"):
        require_schema(engine, "")


@pytest.mark.parametrize("change", list(_REFUSING))
def test_the_statement_each_refusal_names_makes_the_tables_take_writes_again(
    dsn: str, engine: Engine, change: str
) -> None:
    _change(engine, _REFUSING[change][0])
    with engine.connect() as conn:
        [line] = write_refusals(conn)
    _change(engine, line.rsplit(": ", 1)[1])
    require_schema(engine, "")
    check = mqstore("db", "check", "--dsn", dsn)
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize(
    "ddl",
    [
        "CREATE INDEX by_expiration ON activemq_msgs (expiration, container)",
        "ALTER TABLE activemq_msgs ADD COLUMN note text",
        "DROP INDEX activemq_msgs_eidx",
        "CREATE FUNCTION keep() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$; "
        "CREATE TRIGGER off BEFORE INSERT ON activemq_msgs FOR EACH ROW EXECUTE FUNCTION keep(); "
        "ALTER TABLE activemq_msgs DISABLE TRIGGER off",
    ],
    ids=["index-added", "nullable-column-added", "index-dropped", "disabled-trigger"],
)
def test_changes_that_refuse_no_write_do_not_stop_the_broker(
    dsn: str, engine: Engine, ddl: str
) -> None:
    """`mqstore db check` lists those it compares (indexes, columns); the broker starts."""
    _change(engine, ddl)
    require_schema(engine, "")
    with engine.connect() as conn:
        assert write_refusals(conn) == []
    if "TRIGGER" not in ddl:
        assert mqstore("db", "check", "--dsn", dsn).returncode == 1
