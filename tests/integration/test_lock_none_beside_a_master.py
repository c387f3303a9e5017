"""A broker started with ``--lock none`` cannot keep others out of the tables, but it looks
once at the lock before it takes them: while another broker is master (a live lease under
another name, or the row locked by a row-lock master) it refuses to start and changes
nothing; a free or expired lease, or one under its own name, lets it start."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore import app
from mqstore.errors import LockError
from mqstore.lock import LeaseLocker, Renewal, RowLocker
from mqstore.schema import build_schema
from mqstore.settings import load_settings
from tests.integration.conftest import lease_held, row_lock_held

SCHEMA = build_schema("")


def _tables(engine: Engine) -> tuple[object, ...]:
    """Everything a starting broker could write: the lock row, the messages, the acks and
    the journal's run records."""
    with engine.connect() as conn:
        lock = conn.execute(sa.select(SCHEMA.lock)).all()
        return (
            lock,
            conn.execute(sa.select(sa.func.count()).select_from(SCHEMA.msgs)).scalar_one(),
            conn.execute(sa.select(sa.func.count()).select_from(SCHEMA.acks)).scalar_one(),
            conn.execute(sa.select(SCHEMA.journal)).all(),
        )


@pytest.fixture
def lease_of_nj2(engine: Engine) -> Iterator[LeaseLocker]:
    """Broker ``nj2`` holds the lease (long enough to outlast a starting process)."""
    with lease_held(engine, "nj2") as lease:
        yield lease


@pytest.fixture
def row_lock_of_nj2(engine: Engine) -> Iterator[RowLocker]:
    """A row-lock master holds the lock row in its open transaction."""
    with row_lock_held(engine, "nj2") as row:
        yield row


def _serve_x4(dsn: str, data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    """``mqstore serve --lock none`` as broker ``x4`` with its journal; returns it and its
    first line of output once it printed it (or exited)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqstore", "serve", "--dsn", dsn, "--data-dir", str(data_dir),
         "--stomp", "127.0.0.1:0", "--broker-name", "x4", "--lock", "none",
         "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
    )  # fmt: skip
    assert proc.stdout is not None
    return proc, proc.stdout.readline()


@pytest.mark.parametrize(
    ("master", "holder", "standby"),
    [
        ("lease_of_nj2", "held by nj2 for another", "--lock lease"),
        ("row_lock_of_nj2", "held by a row-lock master", "--lock row"),
    ],
)
def test_serve_without_a_lock_refuses_to_start_beside_a_master(
    master: str,
    holder: str,
    standby: str,
    dsn: str,
    engine: Engine,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    request.getfixturevalue(master)
    before = _tables(engine)
    proc, line = _serve_x4(dsn, tmp_path / "data")
    try:
        assert line == "", line  # it never served
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 2, stderr
    errors = [text for text in stderr.splitlines() if text.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    assert f"the lock {SCHEMA.lock.name} is {holder}" in errors[0], errors[0]
    assert "Stop that broker" in errors[0] and standby in errors[0], errors[0]
    assert _tables(engine) == before


def test_a_store_without_a_lock_refuses_the_lease_of_another_broker(
    engine: Engine, lease_of_nj2: LeaseLocker
) -> None:
    settings = load_settings(journal=False, lock="none", broker_name="x4")
    store = app.build_store(settings, engine)
    before = _tables(engine)
    with pytest.raises(LockError, match=r"held by nj2 for another \d+ ms.*--lock lease"):
        store.start()
    assert not store.started
    assert _tables(engine) == before
    assert lease_of_nj2.renew() is Renewal.KEPT  # the lease is still nj2's


def test_a_store_without_a_lock_refuses_the_row_lock_of_another_broker(
    engine: Engine, row_lock_of_nj2: RowLocker
) -> None:
    store = app.build_store(load_settings(journal=False, lock="none", broker_name="x4"), engine)
    before = _tables(engine)
    with pytest.raises(LockError, match=r"held by a row-lock master.*--lock row"):
        store.start()
    assert not store.started
    assert _tables(engine) == before
    assert row_lock_of_nj2.is_held() and row_lock_of_nj2.keep_alive()


def test_a_store_without_a_lock_starts_on_an_expired_lease(engine: Engine) -> None:
    """The row a killed broker leaves: its name, and a lease end that has passed."""
    with engine.begin() as conn:
        conn.execute(
            sa.update(SCHEMA.lock).values(
                broker_name="nj2",
                time=sa.text("(extract(epoch FROM CURRENT_TIMESTAMP) * 1000)::bigint - 1000"),
            )
        )
    store = app.build_store(load_settings(journal=False, lock="none", broker_name="x4"), engine)
    store.start()
    try:
        assert store.started
    finally:
        store.stop()


def test_a_store_without_a_lock_starts_on_a_lease_under_its_own_name(engine: Engine) -> None:
    lease = LeaseLocker(engine, SCHEMA, "x4", lease_ms=120_000, renew_ms=1000)
    assert lease.try_acquire()
    try:
        store = app.build_store(load_settings(journal=False, lock="none", broker_name="x4"), engine)
        store.start()
        assert store.started
        store.stop()
    finally:
        lease.release()


def test_serve_without_a_lock_starts_on_a_free_lock(dsn: str, tmp_path: Path) -> None:
    proc, line = _serve_x4(dsn, tmp_path / "data")
    try:
        assert line.startswith("mqstore serving STOMP on 127.0.0.1:"), (line, proc.poll())
    finally:
        proc.terminate()
        proc.wait(30)
