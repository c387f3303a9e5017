"""A database a newer mqstore migrated: Alembic's own command line refuses it as `mqstore db`
does, saying to upgrade mqstore, and changes nothing."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore import migrate
from tests.migrations.alembic_cli import alembic


@pytest.mark.parametrize("command", [["upgrade", "head"], ["downgrade", "base"], ["current"]])
def test_alembic_cli_on_a_newer_schema_says_to_upgrade_mqstore(
    dsn: str, engine: Engine, command: list[str]
) -> None:
    with engine.begin() as conn:  # as a newer mqstore leaves it
        conn.execute(sa.text("UPDATE mqstore_version SET version_num = '0099'"))
    result = alembic("-x", f"dsn={dsn}", *command)
    assert result.returncode != 0
    head = migrate.head_revision()
    said = result.stderr.strip().splitlines() or [result.stdout]
    assert said == [
        f"database schema is at revision 0099, newer than this mqstore knows (head {head}): "
        "upgrade mqstore"
    ]
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == "0099"
    assert "activemq_msgs" in sa.inspect(engine).get_table_names()
