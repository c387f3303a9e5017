"""Engines from DSNs: network timeouts, and what a lost connection is called."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.db import create_engine, translate_db_errors
from mqstore.errors import DatabaseUnavailableError


def _libpq_parameters(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        return dict(raw.info.get_parameters())


def test_connections_notice_a_host_gone_from_the_network(engine: Engine) -> None:
    params = _libpq_parameters(engine)
    assert params["connect_timeout"] == "10"
    assert params["tcp_user_timeout"] == "30000"
    assert (params["keepalives_idle"], params["keepalives_count"]) == ("10", "3")


def test_a_dsn_keeps_its_own_timeouts(dsn: str) -> None:
    joiner = "&" if "?" in dsn else "?"
    engine = create_engine(f"{dsn}{joiner}connect_timeout=3&tcp_user_timeout=5000")
    try:
        params = _libpq_parameters(engine)
    finally:
        engine.dispose()
    assert (params["connect_timeout"], params["tcp_user_timeout"]) == ("3", "5000")


def test_a_connection_ended_by_the_server_is_called_lost(engine: Engine, dsn: str) -> None:
    other = create_engine(dsn)
    try:
        with engine.connect() as conn:
            pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
            with other.begin() as killer:
                killer.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            with pytest.raises(DatabaseUnavailableError, match="lost the connection") as err:
                translate_db_errors(engine.url, lambda: conn.execute(sa.text("SELECT 1")))
    finally:
        other.dispose()
    assert "DSN right" not in str(err.value)


@pytest.mark.parametrize(("query", "shown"), [("", "mqstore"), ("?application_name=ops", "ops")])
def test_sessions_show_as_mqstore_in_pg_stat_activity_unless_the_dsn_names_them(
    dsn: str, query: str, shown: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGAPPNAME", raising=False)
    own = create_engine(dsn + query)
    try:
        with own.connect() as conn:
            seen = conn.execute(
                sa.text(
                    "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"
                )
            ).scalar()
        assert seen == shown
    finally:
        own.dispose()
