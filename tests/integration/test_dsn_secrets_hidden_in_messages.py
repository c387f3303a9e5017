"""DSNs in messages and logs: every secret libpq parameter hidden, and the host and port
named as libpq finds them (in the URL or in its parameters)."""

from __future__ import annotations

import socket

import pytest
from sqlalchemy.engine import make_url

from mqstore import db
from mqstore.errors import DatabaseUnavailableError
from spark_etl.sources import SourceError, inspect_database, jdbc_source
from tests.integration.test_cli import mqstore

SECRETS = {"password": "QueryPW1", "sslpassword": "KeyPW123", "oauth_client_secret": "OAuth456"}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_redact_hides_every_secret_libpq_parameter_and_keeps_the_rest() -> None:
    query = "&".join(f"{k}={v}" for k, v in SECRETS.items())
    shown = db.redact(f"postgresql://u:UrlPW@h:5433/d?{query}&sslmode=require&passfile=/p")
    for secret in ("UrlPW", *SECRETS.values()):
        assert secret not in shown, shown
    assert shown.startswith("postgresql://u:***@h:5433/d?")
    assert "sslmode=require" in shown and "passfile=" in shown


def test_db_status_on_an_unreachable_database_hides_the_ssl_key_password() -> None:
    port = _closed_port()
    dsn = f"postgresql://u:pw@127.0.0.1:{port}/db?sslpassword=KeyPW123"
    result = mqstore("db", "status", "--dsn", dsn)
    assert result.returncode != 0
    assert f"127.0.0.1:{port}" in result.stderr, result.stderr
    assert "KeyPW123" not in result.stderr + result.stdout, result.stderr


def test_a_host_and_port_given_as_parameters_are_the_ones_named() -> None:
    port = _closed_port()
    dsn = f"postgresql:///nodb?host=127.0.0.1&port={port}"
    result = mqstore("db", "status", "--dsn", dsn)
    assert result.returncode != 0
    assert f"127.0.0.1:{port}" in result.stderr, result.stderr
    assert "local socket" not in result.stderr


def test_spark_jobs_hide_the_ssl_key_password_but_pass_it_to_the_driver() -> None:
    port = _closed_port()
    dsn = f"postgresql://u:pw@127.0.0.1:{port}/db?sslpassword=KeyPW123"
    assert "sslpassword=KeyPW123" in jdbc_source(dsn).url  # pgjdbc needs it
    with pytest.raises(DatabaseUnavailableError) as info:
        inspect_database(dsn)
    assert "KeyPW123" not in str(info.value)
    assert f"127.0.0.1:{port}" in str(info.value)


def test_spark_jobs_name_a_host_given_as_a_parameter(empty_dsn: str) -> None:
    url = make_url(empty_dsn)
    password = f":{url.password}" if url.password else ""
    dsn = (
        f"postgresql://{url.username}{password}@/{url.database}"
        f"?host={url.host}&port={url.port or 5432}"
    )
    with pytest.raises(SourceError) as info:
        inspect_database(dsn, "", ("ACTIVEMQ_MSGS",))
    assert f"on {url.host}:{url.port or 5432}" in str(info.value), str(info.value)
