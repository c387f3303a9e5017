"""Commands on a database whose tables lack a table or column mqstore uses: one line that
says the schema differs and to run `mqstore db check`, exit code 2, nothing changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore import migrate
from mqstore.schema import build_schema
from tests.integration.test_cli import mqstore

#: Ways a schema drifts from head, by name: the DDL that makes the drift.
_DRIFTS = {
    "lock-column": "ALTER TABLE activemq_lock DROP COLUMN broker_name",
    "acks-table": "DROP TABLE activemq_acks",
    "msgs-column": "ALTER TABLE activemq_msgs DROP COLUMN priority",
}

_SCHEMA_DIFFERS = "the database schema differs from what mqstore expects"


def _contents(engine: Engine) -> dict[str, list[str]]:
    """Every row of the prefix's tables that are there, as text: what a command changed."""
    schema = build_schema("")
    tables = (schema.msgs, schema.acks, schema.lock, schema.journal, schema.history)
    with engine.connect() as conn:
        present = set(sa.inspect(conn).get_table_names())
        return {
            name: sorted(conn.execute(sa.text(f"SELECT to_jsonb(t)::text FROM {name} t")).scalars())
            for name in [*(table.name for table in tables), schema.version_table]
            if name in present
        }


def _drift(engine: Engine, drift: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, "
                "msg, priority) VALUES (1, 'queue://orders', 'p', 1, 0, 'x', 4)"
            )
        )
        conn.execute(sa.text(_DRIFTS[drift]))


def _says_the_schema_differs(result: subprocess.CompletedProcess[str], detail: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {_SCHEMA_DIFFERS} ("), lines[0]
    assert detail in lines[0] and "run `mqstore db check`" in lines[0], lines[0]


@pytest.mark.parametrize(
    ("drift", "args", "detail"),
    [
        ("lock-column", ["db", "status"], "broker_name does not exist"),
        ("lock-column", ["db", "downgrade", "0001", "--yes"], "broker_name does not exist"),
        ("lock-column", ["stats"], "broker_name does not exist"),
        ("lock-column", ["lock", "status"], "broker_name does not exist"),
        ("acks-table", ["stats"], '"activemq_acks" does not exist'),
        ("acks-table", ["browse", "payments"], '"activemq_acks" does not exist'),
        ("msgs-column", ["browse", "orders"], "priority does not exist"),
    ],
    ids=lambda value: value if isinstance(value, str) else "-".join(value),
)
def test_a_command_on_a_drifted_schema_says_to_run_db_check(
    dsn: str, engine: Engine, drift: str, args: list[str], detail: str
) -> None:
    _drift(engine, drift)
    before = _contents(engine)
    _says_the_schema_differs(mqstore(*args, "--dsn", dsn), detail)
    assert _contents(engine) == before


@pytest.mark.parametrize(
    ("drift", "detail"),
    [
        ("lock-column", "activemq_lock.broker_name is missing"),
        ("acks-table", "table activemq_acks is missing"),
        ("msgs-column", "activemq_msgs.priority is missing"),
    ],
)
@pytest.mark.parametrize("journal", ["--journal", "--no-journal"])
def test_serve_refuses_a_drifted_schema_before_it_writes(
    dsn: str, engine: Engine, tmp_path: Path, drift: str, detail: str, journal: str
) -> None:
    """Compared at start, before the lock is taken: no lease written, no journal made."""
    _drift(engine, drift)
    before = _contents(engine)
    data_dir = tmp_path / "data"
    result = _serve(dsn, data_dir, journal)
    _says_the_schema_differs(result, detail)
    assert _contents(engine) == before
    assert not data_dir.exists()


def test_serve_on_an_older_revision_says_to_upgrade_and_writes_nothing(
    dsn: str, engine: Engine, tmp_path: Path
) -> None:
    migrate.downgrade(engine, "", migrate.known_revisions()[0])
    before = _contents(engine)
    data_dir = tmp_path / "data"
    result = _serve(dsn, data_dir, "--journal")
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "run `mqstore db upgrade`" in lines[0], result.stderr
    assert _contents(engine) == before
    assert not data_dir.exists()


def _serve(dsn: str, data_dir: Path, journal: str) -> subprocess.CompletedProcess[str]:
    """``mqstore serve`` until it exits, as a refused one does at once (one that starts is
    ended by the timeout, which fails the test); it logs errors only."""
    return subprocess.run(
        [sys.executable, "-m", "mqstore", "serve", "--dsn", dsn, "--data-dir", str(data_dir),
         "--stomp", "127.0.0.1:0", journal, "--log-level", "ERROR"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_db_check_and_db_upgrade_on_drifted_tables_say_what_to_restore(
    dsn: str, engine: Engine
) -> None:
    """Tables at head that lack a column: `db check` lists it and says what to do, and
    `db upgrade`, which no migration can mend them with, says so in one line, exit 2."""
    _drift(engine, "msgs-column")
    before = _contents(engine)
    check = mqstore("db", "check", "--dsn", dsn)
    assert check.returncode == 1, check.stderr
    assert "- activemq_msgs.priority is missing" in check.stderr
    assert "which no migration mends: restore what is missing" in check.stderr
    upgrade = mqstore("db", "upgrade", "--dsn", dsn)
    assert upgrade.returncode == 2, (upgrade.stdout, upgrade.stderr)
    [line] = upgrade.stderr.strip().splitlines()
    assert line.startswith("error: the tables differ from what revision"), line
    assert "activemq_msgs.priority is missing" in line and "mqstore db check" in line, line
    assert _contents(engine) == before
