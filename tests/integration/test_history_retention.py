"""Retention of MQSTORE_HISTORY: what a trim deletes, and what it must keep."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.app import build_store
from mqstore.settings import load_settings
from mqstore.store import PostgresStore
from mqstore.store.history import TrimBound, trim_history
from tests.integration.conftest import StoreFactory, msg
from tests.integration.test_cli import mqstore

Q = "queue://orders"
DAY_MS = 86_400_000


def _removed(store: PostgresStore, engine: Engine, ages_days: list[float]) -> list[int]:
    """Store and remove one message per age; returns the hist_ids, stamped that old."""
    ids = store.add([msg(Q, n) for n in range(len(ages_days))])
    store.remove(Q, ids)
    now = int(time.time() * 1000)
    with engine.begin() as conn:
        hist = conn.execute(sa.text("SELECT hist_id, id FROM mqstore_history")).all()
        by_id = {row.id: row.hist_id for row in hist}
        for msg_id, age in zip(ids, ages_days, strict=True):
            conn.execute(
                sa.text("UPDATE mqstore_history SET removed_at = :at WHERE id = :id"),
                {"at": now - int(age * DAY_MS), "id": msg_id},
            )
    return [by_id[i] for i in ids]


def _left(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return list(
            conn.execute(sa.text("SELECT hist_id FROM mqstore_history ORDER BY hist_id")).scalars()
        )


def test_trim_deletes_only_rows_older_than_the_bound_in_batches(
    store: PostgresStore, engine: Engine
) -> None:
    ages = [40, 1, 35, 0.1, 31, 50, 2, 45]
    hist = _removed(store, engine, ages)
    batches: list[int] = []
    trimmed = trim_history(engine, "", TrimBound.older_than(30), batch=2, progress=batches.append)
    old = {h for h, age in zip(hist, ages, strict=True) if age > 30}
    assert trimmed == len(old) == 5
    assert batches == [2, 2, 1]
    assert _left(engine) == sorted(set(hist) - old)
    assert trim_history(engine, "", TrimBound.older_than(30)) == 0


def test_a_broker_store_trims_old_history_by_itself(
    make_store: StoreFactory, engine: Engine
) -> None:
    store = make_store(history_retention_days=7, cleanup_interval_s=0.1)
    hist = _removed(store, engine, [10, 3, 8])
    deadline = time.monotonic() + 10
    while len(_left(engine)) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _left(engine) == [hist[1]]


def test_history_setting_off_records_no_removals(dsn: str, engine: Engine) -> None:
    settings = load_settings(dsn=dsn, history=False, journal=False, lock="none")
    store = build_store(settings, engine)
    assert isinstance(store, PostgresStore)
    store.start()
    try:
        store.remove(Q, store.add([msg(Q, 1)]))
    finally:
        store.stop()
    assert _left(engine) == []


def _identity(engine: Engine) -> dict[str, str]:
    """The database as an export records it (``pg_control_system()``, ``current_database()``)."""
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT system_identifier::text, current_database() FROM pg_control_system()")
        ).one()
    return {"system_identifier": row[0], "name": row[1]}


def _write_export(
    out: Path,
    engine: Engine,
    *,
    hist_max_id: int | None,
    exported_at: int,
    prefix: str = "",
    database: dict[str, str] | None = None,
    recorded: bool = True,
) -> Path:
    """The watermarks an export of ``engine``'s database (or ``database``) writes."""
    out.mkdir(parents=True, exist_ok=True)
    marks = {
        "format": 3,
        "run_id": "20261122T000000-0123abcd",
        "exported_at": exported_at,
        "prefix": prefix,
        "hist_max_id": hist_max_id,
        "history_source": "mqstore_history",
    }
    if recorded:
        marks["database"] = database or _identity(engine)
    else:
        marks["format"] = 2  # written before exports recorded their database
    (out / "_watermarks.json").write_text(json.dumps(marks))
    return out


def test_cli_trims_only_what_an_export_archived(
    store: PostgresStore, engine: Engine, dsn: str, tmp_path: Path
) -> None:
    hist = _removed(store, engine, [5, 4, 3, 2])
    now = int(time.time() * 1000)
    export = _write_export(tmp_path / "archive", engine, hist_max_id=hist[2], exported_at=now)
    dry = mqstore("history", "trim", "--dsn", dsn, "--exported", str(export), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would delete 3 history row(s)" in dry.stdout
    assert _left(engine) == hist
    both = mqstore(
        "history", "trim", "--dsn", dsn, "--exported", str(export), "--older-than-days", "3.5"
    )
    assert both.returncode == 0, both.stderr
    assert "deleted 2 history row(s)" in both.stdout
    assert _left(engine) == hist[2:]
    rest = mqstore("history", "trim", "--dsn", dsn, "--exported", str(export))
    assert "deleted 1 history row(s)" in rest.stdout
    assert _left(engine) == [hist[3]]  # above the export's watermark: not archived yet


def test_cli_keeps_rows_that_may_have_committed_after_the_export_read(
    store: PostgresStore, engine: Engine, dsn: str, tmp_path: Path
) -> None:
    hist = _removed(store, engine, [0.001, 1])
    export = _write_export(
        tmp_path / "archive", engine, hist_max_id=hist[-1], exported_at=int(time.time() * 1000)
    )
    result = mqstore("history", "trim", "--dsn", dsn, "--exported", str(export))
    assert result.returncode == 0, result.stderr
    assert _left(engine) == [hist[0]]  # stamped 90 s before the export: maybe not in it


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        (None, "--older-than-days N, --exported DIR"),
        ("missing", "holds no finished export"),
        ("other-prefix", "table prefix 'BRK1_'"),
        ("other-database", "archives database 'broker' (system 1234567890)"),
        ("other-cluster", "(system 1234567890), not database"),
        ("unrecorded", "does not record which database"),
        ("garbage", "cannot read"),
        ("blank", "not an export's watermarks"),
    ],
)
def test_cli_trim_refuses_unclear_requests(
    store: PostgresStore, engine: Engine, dsn: str, tmp_path: Path, setup: str | None, words: str
) -> None:
    hist = _removed(store, engine, [100])
    args = ["history", "trim", "--dsn", dsn]
    out = tmp_path / "archive"
    now = int(time.time() * 1000)
    if setup == "other-prefix":
        _write_export(out, engine, hist_max_id=hist[0], exported_at=now, prefix="BRK1_")
    elif setup == "other-database":
        other = {"system_identifier": "1234567890", "name": "broker"}
        _write_export(out, engine, hist_max_id=hist[0], exported_at=now, database=other)
    elif setup == "other-cluster":  # same database name, another PostgreSQL cluster
        other = {**_identity(engine), "system_identifier": "1234567890"}
        _write_export(out, engine, hist_max_id=hist[0], exported_at=now, database=other)
    elif setup == "unrecorded":
        _write_export(out, engine, hist_max_id=hist[0], exported_at=now, recorded=False)
    elif setup in ("garbage", "blank"):
        out.mkdir()
        (out / "_watermarks.json").write_text("{not json" if setup == "garbage" else "{}")
    if setup is not None:
        args += ["--exported", str(out)]
    result = mqstore(*args)
    assert result.returncode == 2
    assert words in result.stderr and "Traceback" not in result.stderr
    assert _left(engine) == hist
