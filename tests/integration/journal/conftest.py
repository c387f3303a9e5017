"""Journaled stores on a fresh migrated database per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from journal.format import Position
from journal.store import JournaledStore
from mqstore.schema import build_schema
from mqstore.store import PostgresStore, Store, StoredMessage
from tests.integration.conftest import StoreFactory, msg

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


@dataclass
class Subject:
    """A store under a differential scenario: "postgres", "journaled" (everything left in
    the window) or "checkpointed" (``settle`` checkpoints); ``reopen`` restarts it on the
    same tables (journaled: stopped without a checkpoint, so the next start replays)."""

    store: Store
    settle: Callable[[], None]
    reopen_store: Callable[[], Store]
    engine: Engine
    kwargs: dict[str, object] = field(default_factory=dict)

    def reopen(self) -> None:
        self.store = self.reopen_store()

    def history(self) -> list[tuple[int, str]]:
        """(ID, outcome) of every history row, once everything reached the database."""
        if isinstance(self.store, JournaledStore):
            self.store.checkpoint()
        h = build_schema("").history
        stmt = sa.select(h.c.id, h.c.outcome).order_by(h.c.id)
        with self.engine.connect() as conn:
            return [(int(r[0]), str(r[1])) for r in conn.execute(stmt)]

    def history_bodies(self) -> dict[int, bytes | None]:
        """ID -> MSG of every history row, once everything reached the database."""
        if isinstance(self.store, JournaledStore):
            self.store.checkpoint()
        h = build_schema("").history
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(h.c.id, h.c.msg)).all()
        return {int(r[0]): None if r[1] is None else bytes(r[1]) for r in rows}


@pytest.fixture(params=["postgres", "journaled", "checkpointed"])
def subject(
    request: pytest.FixtureRequest,
    engine: Engine,
    make_store: StoreFactory,
    make_journaled: JournaledFactory,
) -> Callable[..., Subject]:
    def build(**kwargs: object) -> Subject:
        if request.param == "postgres":
            holder: list[Store] = [make_store(**kwargs)]

            def reopen_pg() -> Store:
                holder[0].stop()
                holder[0] = make_store(**kwargs)
                return holder[0]

            return Subject(holder[0], lambda: None, reopen_pg, engine, kwargs)
        journaled: list[JournaledStore] = [make_journaled(**kwargs)]

        def settle() -> None:
            if request.param == "checkpointed":
                journaled[0].checkpoint()

        def reopen_journal() -> Store:
            journaled[0].stop(checkpoint=False)  # what a crash leaves: replayed on start
            journaled[0] = make_journaled(**kwargs)
            return journaled[0]

        return Subject(journaled[0], settle, reopen_journal, engine, kwargs)

    return build


def seqs(rows: list[StoredMessage]) -> list[int | None]:
    return [r.msgid_seq for r in rows]
