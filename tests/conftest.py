"""Real PostgreSQL for every test that needs one.

The server: ``MQSTORE_TEST_DSN`` when set; else a testcontainers PostgreSQL when a Docker
engine answers; else a throwaway server from the ``pgserver`` package's PostgreSQL binaries.
Each test gets its own database: a clone of a template migrated once per session.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Engine, make_url

from mqstore import migrate
from mqstore.db import create_engine, libpq_dsn

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MQSTORE_SHARED_DIR", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures" / "activemq-5.17-pg"


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` run first. pytest-xdist's worksteal hands each worker a
    contiguous share and lets an idle worker take from the end of another's, so a long test
    collected late can leave one worker running it alone while the other has nothing left."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    """A DSN with rights to create databases on a real PostgreSQL server."""
    env_dsn = os.environ.get("MQSTORE_TEST_DSN")
    if env_dsn:
        yield env_dsn
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:15", driver=None) as container:
            yield container.get_connection_url()
        return
    yield from _throwaway_server()


def _throwaway_server() -> Iterator[str]:
    """A :class:`ThrowawayServer` for the whole session."""
    server = ThrowawayServer()
    try:
        yield server.dsn
    finally:
        server.close()


class ThrowawayServer:
    """A private PostgreSQL cluster from the binaries the ``pgserver`` package ships, on a
    free loopback port, that a test may stop, restart or crash (``pg_ctl``).

    Made the way the embedded store makes its own (:mod:`mqstore.embedded`): as root the
    server runs as that store's system user, with no login shell and no mode bit changed
    outside the cluster. It listens on TCP, which ActiveMQ's and Spark's JDBC drivers need.
    """

    def __init__(self) -> None:
        from mqstore.embedded.account import ensure_traverse, server_account
        from mqstore.embedded.server import binaries_dir

        self.bin = binaries_dir()
        self.dir = Path(tempfile.mkdtemp(prefix="mqs-pg-", dir="/tmp"))
        self.account = server_account(self.dir)
        if self.account is not None:
            os.chown(self.dir, self.account.uid, self.account.gid)
            ensure_traverse(self.account, [self.dir, self.bin.parent])
        self._run("initdb", "-D", str(self.dir), "--auth=trust", "-U", "postgres", "-E", "utf8")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.start()

    def _run(self, program: str, *args: str) -> None:
        account = self.account
        ids = {} if account is None else {"user": account.uid, "group": account.gid}
        result = subprocess.run(
            [str(self.bin / program), *args],
            capture_output=True, text=True, cwd="/", timeout=300, check=False,
            **ids,  # type: ignore[arg-type]
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} failed: {result.stderr}")

    def _pg_ctl(self, *args: str) -> None:
        self._run("pg_ctl", "-D", str(self.dir), "-w", *args)

    def start(self) -> None:
        options = f"-h 127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off"
        self._pg_ctl("-o", options, "-l", str(self.dir / "log"), "start")

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m mode``: ``fast`` ends every session; ``immediate`` crashes."""
        self._pg_ctl("-m", mode, "stop")

    def restart(self, mode: str = "fast", down_s: float = 0.0) -> None:
        """Stop (ending every session), stay down ``down_s`` seconds, start again."""
        self.stop(mode)
        time.sleep(down_s)
        self.start()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


_counter = itertools.count()
_RUN_TAG = f"{os.getpid()}"


class Databases:
    """Creates and drops per-test databases on the session's server.

    A test's own database is dropped by a background thread once the test is done (a
    DROP DATABASE waits ~60 ms for the server to sync), so the drops overlap the tests.
    """

    def __init__(self, admin_dsn: str) -> None:
        self.admin_dsn = libpq_dsn(admin_dsn)
        self.url = make_url(admin_dsn)
        self.created: list[str] = []
        self.template: str | None = None
        self._done: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._dropper = threading.Thread(
            target=self._drop_done, name="drop-test-databases", daemon=True
        )
        self._dropper.start()

    def _drop_done(self) -> None:
        while (name := self._done.get()) is not None:
            try:
                self.drop(name)
            except psycopg.Error:
                continue  # left in ``created``: drop_all tries it again
            self.created.remove(name)

    def release(self, name: str) -> None:
        """The test using ``name`` is over: drop it in the background."""
        self._done.put(name)

    def _admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.admin_dsn, autocommit=True)

    def dsn_for(self, name: str) -> str:
        return self.url.set(drivername="postgresql+psycopg", database=name).render_as_string(
            hide_password=False
        )

    def create(self, template: str | None = None) -> str:
        name = f"mqs_t{_RUN_TAG}_{next(_counter)}"
        with self._admin() as conn:
            if template:
                conn.execute(
                    sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                        sql.Identifier(name), sql.Identifier(template)
                    )
                )
            else:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self.created.append(name)
        return name

    def migrated_template(self) -> str:
        if self.template is None:
            name = self.create()
            engine = create_engine(self.dsn_for(name))
            migrate.upgrade(engine)
            engine.dispose()
            self.template = name
        return self.template

    def drop(self, name: str) -> None:
        with self._admin() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def drop_all(self) -> None:
        self._done.put(None)
        self._dropper.join()
        for name in reversed(self.created):
            self.drop(name)


@pytest.fixture(scope="session")
def databases(pg_admin_dsn: str) -> Iterator[Databases]:
    dbs = Databases(pg_admin_dsn)
    yield dbs
    dbs.drop_all()


@pytest.fixture
def empty_dsn(databases: Databases) -> Iterator[str]:
    """A DSN of a fresh, empty database (no tables)."""
    name = databases.create()
    yield databases.dsn_for(name)
    databases.release(name)


@pytest.fixture
def dsn(databases: Databases) -> Iterator[str]:
    """A DSN of a fresh database migrated to head (default prefix)."""
    name = databases.create(template=databases.migrated_template())
    yield databases.dsn_for(name)
    databases.release(name)


@pytest.fixture
def engine(dsn: str) -> Iterator[Engine]:
    eng = create_engine(dsn)
    yield eng
    eng.dispose()


@pytest.fixture
def empty_engine(empty_dsn: str) -> Iterator[Engine]:
    eng = create_engine(empty_dsn)
    yield eng
    eng.dispose()


def load_activemq_fixture(engine: Engine, *, with_rows: bool = True) -> None:
    """Load the schema (and rows) a real ActiveMQ 5.17 broker wrote into ``engine``'s database."""
    parts = [FIXTURES / "schema.sql"] + ([FIXTURES / "data.sql"] if with_rows else [])
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        for part in parts:
            cur.execute(part.read_text())
            cur.execute("SELECT pg_catalog.set_config('search_path', 'public', false)")
        raw.commit()
    finally:
        raw.close()


@pytest.fixture
def activemq_engine(empty_engine: Engine) -> Engine:
    """A database holding exactly the ActiveMQ 5.17 fixture schema and rows."""
    load_activemq_fixture(empty_engine)
    return empty_engine


def count_rows(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


@contextlib.contextmanager
def database_away(engine: Engine, databases: Databases) -> Iterator[None]:
    """The test database refuses new connections and its sessions are ended, then returns."""
    name = engine.url.database
    with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name))
        )
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                      (name,))  # fmt: skip
        try:
            yield
        finally:
            admin.execute(
                sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(name))
            )


_role_numbers = itertools.count()


@contextlib.contextmanager
def scratch_role(databases: Databases, dsn: str, purpose: str, *grants: str) -> Iterator[str]:
    """A NOLOGIN role ``mqs_t<pid>_<purpose>_<n>`` for one test, its name yielded:
    ``grants`` (statements with ``{role}`` for its quoted name) run first on ``dsn``'s
    database; afterwards what it owns there is dropped, then the role."""
    name = f"mqs_t{os.getpid()}_{purpose}_{next(_role_numbers)}"
    role = sql.Identifier(name)
    with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(role))
    try:
        with psycopg.connect(libpq_dsn(dsn), autocommit=True) as conn:
            for grant in grants:
                conn.execute(sql.SQL(grant).format(role=role))
        yield name
    finally:
        with psycopg.connect(libpq_dsn(dsn), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(role))
        with psycopg.connect(databases.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(role))


def as_role(dsn: str, role: str) -> str:
    """``dsn`` with its sessions run as ``role`` (``options=-crole=...``)."""
    return (
        make_url(dsn)
        .update_query_dict({"options": f"-crole={role}"})
        .render_as_string(hide_password=False)
    )


@contextlib.contextmanager
def small_tmpfs(directory: Path, size: str) -> Iterator[Path]:
    """``directory`` (made here) as a tmpfs of ``size`` (``2m``), unmounted afterwards; the
    test is skipped where none can be mounted (not root, or no mount permission)."""
    directory.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
        capture_output=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr!r}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)
