"""The audit's lock section sees a row-lock master, which writes nothing into the lock row:
ActiveMQ's default database locker (``FOR UPDATE``) or mqstore's ``--lock row``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import typer
from sqlalchemy.engine import Engine, make_url
from typer.testing import CliRunner

from spark_etl import cli
from spark_etl.audit import audit
from tests.conftest import Databases, as_role, scratch_role
from tests.integration.test_cli import mqstore
from tests.spark.conftest import dsn_of
from tests.spark.test_audit import _KeepAlive

NOW = 1795400000000


def _lock_status(dsn: str) -> str:
    """What ``mqstore lock status`` says of the lock."""
    shown = mqstore("lock", "status", "--dsn", dsn)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


@pytest.mark.parametrize("mode", ["FOR UPDATE", "FOR NO KEY UPDATE"], ids=["activemq", "mqstore"])
def test_a_master_holding_the_row_lock_is_reported_held_until_it_lets_go(
    spark: Any, engine: Engine, tmp_path: Path, mode: str
) -> None:
    """While a session keeps the lock row locked in an open transaction, as ActiveMQ's
    ``DefaultDatabaseLocker`` (and mqstore's row locker) does for its life as master, the
    audit reports the lock held by a row lock, as ``mqstore lock status`` does, and the
    master keeps its row (its keep-alive UPDATE still works); after its rollback, free."""
    dsn = dsn_of(engine)
    with engine.connect() as master:
        master.execute(sa.text(f"SELECT * FROM activemq_lock WHERE id = 1 {mode}"))
        report = audit(spark, dsn, tmp_path / "held", now_ms=NOW)
        lock = report["lock"]
        assert (lock["state"], lock["row_lock"], lock["row_lock_error"]) == (
            "held (row lock)",
            True,
            None,
        )
        assert (lock["holder"], lock["lease_age_ms"]) == (None, None)  # no lease recorded
        assert "held by a row-lock master" in _lock_status(dsn)
        keep_alive = master.execute(sa.text(f"UPDATE activemq_lock SET time = {NOW} WHERE id = 1"))
        assert keep_alive.rowcount == 1
        master.rollback()
    report = audit(spark, dsn, tmp_path / "free", now_ms=NOW)
    lock = report["lock"]
    assert (lock["state"], lock["row_lock"], lock["row_lock_error"]) == ("free", False, None)
    assert "free" in _lock_status(dsn)
    assert "held (row lock)" in (tmp_path / "held" / "audit.html").read_text()


def test_the_audit_leaves_the_lock_row_free_for_a_broker(
    spark: Any, engine: Engine, tmp_path: Path
) -> None:
    """Once the audit is done, a broker takes the row lock at once (NOWAIT): the probe
    holds nothing after its instant."""
    report = audit(spark, dsn_of(engine), tmp_path, now_ms=NOW)
    assert report["lock"]["state"] == "free"
    with engine.connect() as broker:
        taken = broker.execute(
            sa.text("SELECT id FROM activemq_lock WHERE id = 1 FOR UPDATE NOWAIT")
        ).all()
        assert taken == [(1,)]
        broker.rollback()


@pytest.fixture
def select_only_dsn(databases: Databases, dsn: str) -> Iterator[str]:
    """``dsn`` with its sessions run as a role granted SELECT only, as the read-only role
    of docs/spark.md."""
    grant = "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"
    with scratch_role(databases, dsn, "audit", grant) as name:
        yield as_role(dsn, name)


@pytest.mark.parametrize("session", ["read-only", "select-only role"])
def test_a_session_that_may_not_lock_the_row_reports_the_lock_unknown_and_why(
    spark: Any, engine: Engine, request: pytest.FixtureRequest, tmp_path: Path, session: str
) -> None:
    """A session that may not lock rows (``default_transaction_read_only``, or a role
    without UPDATE privilege) cannot tell whether a row-lock master holds the lock: the
    audit still runs and says so, naming what to grant, rather than reporting it free."""
    if session == "read-only":
        url = make_url(dsn_of(engine)).update_query_dict(
            {"options": "-cdefault_transaction_read_only=on"}
        )
        dsn = url.render_as_string(hide_password=False)
    else:
        dsn = request.getfixturevalue("select_only_dsn")
    with engine.connect() as master:
        master.execute(sa.text("SELECT * FROM activemq_lock WHERE id = 1 FOR UPDATE"))
        report = audit(spark, dsn, tmp_path, now_ms=NOW)
        master.rollback()
    lock = report["lock"]
    assert (lock["state"], lock["row_lock"]) == ("unknown", None)
    assert "cannot tell whether a row-lock master holds activemq_lock" in lock["row_lock_error"]
    assert "UPDATE privilege on activemq_lock" in lock["row_lock_error"]


def _audit_summary(spark: Any, dsn: str, out: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The line ``mqstore audit`` prints (the shared Spark session runs it)."""
    monkeypatch.setattr(cli, "_session", lambda *_args: _KeepAlive(spark))
    app = typer.Typer()
    cli.register(app)
    env = {"MQSTORE_DSN": dsn, "MQSTORE_TABLE_PREFIX": ""}
    ran = CliRunner().invoke(app, ["audit", "--out", str(out)], env=env)
    assert ran.exit_code == 0, ran.output
    return ran.output


def test_the_audit_summary_line_names_the_lock_state_and_lease_holder(
    spark: Any, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one line the command prints says who holds the lock, without opening the
    report: a row-lock master, a lease and its broker, or nobody."""
    dsn = dsn_of(engine)
    with engine.connect() as master:
        master.execute(sa.text("SELECT * FROM activemq_lock WHERE id = 1 FOR UPDATE"))
        assert "; lock: held (row lock); " in _audit_summary(
            spark, dsn, tmp_path / "row", monkeypatch
        )
        master.rollback()
    with engine.begin() as broker:  # a lease that runs for another hour
        broker.execute(
            sa.text(
                "UPDATE activemq_lock SET broker_name = 'amq-1', "
                "time = (extract(epoch FROM now()) * 1000)::bigint + 3600000 WHERE id = 1"
            )
        )
    assert "; lock: held (lease) by amq-1; " in _audit_summary(
        spark, dsn, tmp_path / "lease", monkeypatch
    )
    with engine.begin() as broker:
        broker.execute(sa.text("UPDATE activemq_lock SET broker_name = NULL, time = 0"))
    assert "; lock: free; " in _audit_summary(spark, dsn, tmp_path / "free", monkeypatch)
