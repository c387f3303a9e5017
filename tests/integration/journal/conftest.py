"""Journaled stores on a fresh migrated database per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from journal.format import Position
from journal.store import JournaledStore
from mqstore.store import PostgresStore
from tests.integration.conftest import msg

JournaledFactory = Callable[..., JournaledStore]


@pytest.fixture
def make_journaled(engine: Engine, tmp_path: Path) -> Iterator[JournaledFactory]:
    """Build and start a JournaledStore; pg options and journal options by keyword."""
    stores: list[JournaledStore] = []
    pg_keys = {
        "prioritized",
        "history",
        "history_bodies",
        "history_retention_days",
        "max_message_bytes",
        "prefix",
        "cleanup_interval_s",
    }

    def make(directory: Path | None = None, **kwargs: object) -> JournaledStore:
        pg_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in pg_keys}
        pg_kwargs.setdefault("cleanup_interval_s", 0)
        pg = PostgresStore(engine, **pg_kwargs)  # type: ignore[arg-type]
        kwargs.setdefault("checkpoint_interval_ms", 3_600_000)
        kwargs.setdefault("shared_lock", False)
        store = JournaledStore(pg, directory or tmp_path / "journal", **kwargs)  # type: ignore[arg-type]
        store.start()
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.stop()


def crashed_journal(
    make_journaled: JournaledFactory, directory: Path, count: int, container: str
) -> list[Position]:
    """A journal in ``directory`` holding ``count`` adds to ``container`` (one record each)
    that never reached the database: its store stopped as a crash leaves it. Returns the
    end position of each record."""
    store = make_journaled(directory)
    ends = []
    for i in range(count):
        store.add([msg(container, i)])
        ends.append(store.journal.position)
    store.stop(checkpoint=False)
    return ends
