"""The loopback endpoint of the embedded PostgreSQL (what the Spark jobs read it through):
only a client holding its password gets in, sessions are read-only, a cancel reaches the
server, and closing the endpoint ends every session. Clients are separate processes, as
Spark's JVM is."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest

from mqstore.embedded import EmbeddedPostgres, LoopbackEndpoint
from tests.integration.test_embedded import Workdir

_CLIENT = """
import sys, threading, time
import psycopg
dsn, action = sys.argv[1], sys.argv[2]
try:
    conn = psycopg.connect(dsn, connect_timeout=10)
except psycopg.OperationalError as exc:
    print("refused:", str(exc).strip().splitlines()[-1])
    sys.exit(0)
if action == "whoami":
    print(conn.execute("SELECT current_user, current_setting('default_transaction_read_only')")
          .fetchone())
elif action == "write":
    try:
        conn.execute("CREATE TABLE written (a int)")
        print("written")
    except psycopg.errors.ReadOnlySqlTransaction:
        print("read-only")
elif action == "cancel":
    threading.Thread(target=lambda: (time.sleep(0.5), conn.cancel())).start()
    try:
        conn.execute("SELECT pg_sleep(30)")
    except psycopg.errors.QueryCanceled:
        print("canceled")
elif action == "hold":
    print("connected", flush=True)
    try:
        conn.execute("SELECT pg_sleep(60)")
    except psycopg.OperationalError:
        print("ended")
"""


def _client(dsn: str, action: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", _CLIENT, dsn, action],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    work = Workdir()
    embedded = EmbeddedPostgres(work.path / "mqstore-data", stop_on_close=True)
    try:
        embedded.start()
        yield embedded
    finally:
        embedded.close()
        work.close()


@pytest.fixture
def endpoint(server: EmbeddedPostgres) -> Iterator[LoopbackEndpoint]:
    assert server.socket_path is not None
    with LoopbackEndpoint(str(server.socket_path)) as opened:
        yield opened


def test_only_the_password_holder_gets_in(endpoint: LoopbackEndpoint) -> None:
    assert _client(endpoint.dsn(), "whoami") == "('postgres', 'on')"
    wrong = endpoint.dsn().replace(endpoint.password, "guessed")
    guessed = _client(wrong, "whoami")
    assert guessed.startswith("refused:")
    assert 'FATAL:  password authentication failed for user "postgres"' in guessed
    bare = f"postgresql://postgres@127.0.0.1:{endpoint.port}/postgres"
    assert _client(bare, "whoami").endswith("fe_sendauth: no password supplied")
    encrypted = _client(endpoint.dsn() + "?sslmode=require", "whoami")
    assert encrypted.startswith("refused:") and "server does not support SSL" in encrypted


def test_sessions_are_read_only(endpoint: LoopbackEndpoint, server: EmbeddedPostgres) -> None:
    assert _client(endpoint.dsn(), "write") == "read-only"
    assert server.socket_path is not None
    with psycopg.connect(host=str(server.socket_path.parent), user="postgres") as conn:
        assert conn.execute("SELECT to_regclass('written')").fetchone() == (None,)


def test_a_cancel_reaches_the_server(endpoint: LoopbackEndpoint) -> None:
    assert _client(endpoint.dsn(), "cancel") == "canceled"


def test_closing_the_endpoint_ends_its_sessions(server: EmbeddedPostgres) -> None:
    assert server.socket_path is not None
    endpoint = LoopbackEndpoint(str(server.socket_path))
    holder = subprocess.Popen(
        [sys.executable, "-c", _CLIENT, endpoint.dsn(), "hold"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "connected"
        endpoint.close()
        assert holder.stdout.readline().strip() == "ended"
        assert _client(endpoint.dsn(), "whoami").startswith("refused:")
    finally:
        holder.kill()
        holder.wait(10)
