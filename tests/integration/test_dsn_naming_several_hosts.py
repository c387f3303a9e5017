"""A DSN may name several hosts as libpq's URLs do (``postgresql://USER@H1:P1,H2:P2/DB``):
mqstore connects to the first that answers, as it does for ``?host=H1,H2&port=P1,P2``."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from tests.integration.test_cli import mqstore


def _several_hosts(dsn: str, hosts: str) -> str:
    """``dsn`` with ``hosts`` (``H1:P1,H2:P2``) in place of its host and port."""
    url = make_url(dsn)
    user = url.username or ""
    password = f":{url.password}" if url.password else ""
    return f"postgresql://{user}{password}@{hosts}/{url.database}"


def test_a_dsn_naming_several_hosts_connects_to_the_one_that_answers(dsn: str) -> None:
    url = make_url(dsn)
    first_down = _several_hosts(dsn, f"127.0.0.1:1,{url.host}:{url.port or 5432}")
    result = mqstore("db", "check", "--dsn", first_down)
    assert result.returncode == 0, result.stderr
    assert "password" not in result.stderr, result.stderr


def test_a_dsn_naming_several_hosts_none_of_which_answers_names_them_all(dsn: str) -> None:
    result = mqstore("db", "check", "--dsn", _several_hosts(dsn, "127.0.0.1:1,127.0.0.1:2"))
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "cannot connect to PostgreSQL at 127.0.0.1:1,127.0.0.1:2" in last, last
    assert "'@' in the password" not in last, last


def test_a_dsn_naming_its_hosts_twice_is_refused_saying_so(dsn: str) -> None:
    twice = _several_hosts(dsn, "127.0.0.1:1,127.0.0.1:2") + "?port=5432"
    result = mqstore("db", "check", "--dsn", twice)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "names several hosts both before the database and in its" in last, last
