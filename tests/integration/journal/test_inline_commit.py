"""Commits on the event loop: the journaled store's ``try_commit`` and the broker's writer.

``try_commit`` must either commit exactly as ``commit`` does or write nothing and say so,
never wait for a checkpoint or the database; the writer must keep submission order whether
a batch ran on the loop or in its thread.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.broker.writer import Op, StoreWriter
from mqstore.errors import DuplicateMessageError
from mqstore.store.model import Batch, Removal
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory

Q = "queue://inline"


def test_try_commit_commits_like_commit(make_journaled: JournaledFactory) -> None:
    store = make_journaled()
    [first] = store.add([msg(Q, 0)])  # the producer's first message asks the database
    ids = store.try_commit(Batch(adds=[msg(Q, 1), msg(Q, 2)], removes=[Removal(Q, first)]))
    assert ids is not None and len(ids) == 2 and first < ids[0] < ids[1]
    assert [m.id for m in store.page(Q, None, 10)] == ids
    # A producer's sequence at or below the highest seen may be a duplicate, which only the
    # database can tell: declined, and refused by commit as before.
    assert store.try_commit(Batch(adds=[msg(Q, 2)])) is None
    with pytest.raises(DuplicateMessageError):
        store.commit(Batch(adds=[msg(Q, 2)]))
    assert store.count(Q) == 2


def test_try_commit_declines_what_needs_the_database(make_journaled: JournaledFactory) -> None:
    store = make_journaled()
    assert store.try_commit(Batch(adds=[msg(Q, 0, producer="ID:new-1:1:1")])) is None
    assert store.count(Q) == 0
    [kept] = store.add([msg(Q, 0, producer="ID:new-1:1:1")])
    store.checkpoint()  # now only the database knows the message
    assert store.try_commit(Batch(removes=[Removal(Q, kept)])) is None
    assert store.count(Q) == 1
    assert store.remove(Q, [kept]) == 1


def test_try_commit_does_not_wait_for_a_checkpoint(
    make_journaled: JournaledFactory, engine: Engine
) -> None:
    store = make_journaled()
    store.add([msg(Q, 0)])
    with engine.connect() as blocker:
        blocker.execute(sa.text("LOCK TABLE activemq_msgs IN ACCESS EXCLUSIVE MODE"))
        checkpoint = threading.Thread(target=store.checkpoint)
        checkpoint.start()
        deadline = time.monotonic() + 10
        declined = False
        while not declined and time.monotonic() < deadline:
            started = time.monotonic()
            declined = store.try_commit(Batch(adds=[msg(Q, 1)])) is None
            assert time.monotonic() - started < 2, "try_commit waited"
            if not declined:
                time.sleep(0.01)  # the checkpoint has not taken the gate yet
        assert declined, "try_commit never saw the checkpoint holding the writers"
        blocker.rollback()
    checkpoint.join(10)
    assert store.try_commit(Batch(adds=[msg(Q, 2)])) is not None


def test_writer_keeps_submission_order_across_loop_and_thread(
    make_journaled: JournaledFactory,
) -> None:
    store = make_journaled()
    old = store.add([msg(Q, n, producer="ID:old-1:1:1") for n in range(30)])
    store.checkpoint()  # removing these now needs the database: the thread does it
    producers = [f"ID:p{n}-1:1:1" for n in range(3)]
    completed: list[str] = []

    async def run() -> tuple[StoreWriter, list[list[int]]]:
        writer = StoreWriter(store, max_batch=50)
        writer.start()
        submitted: list[str] = []
        futures = []

        def submit(name: str, op: Op) -> None:
            def done(ids: list[int] | None, exc: BaseException | None) -> None:
                assert exc is None, exc
                completed.append(name)

            op.done = done
            submitted.append(name)
            futures.append(writer.submit(op))

        for n in range(300):
            if n % 10 == 5:  # the thread is busy with this while the next sends arrive
                submit(f"remove {n}", Op(removes=[Removal(Q, old[n // 10])]))
                while writer.backlog:  # until the thread has taken it
                    await asyncio.sleep(0)
            # A new producer's first message needs the database too; the rest can commit
            # on the loop whenever the thread is idle.
            submit(f"send {n}", Op(adds=[msg(Q, n, producer=producers[n // 100])]))
            if n % 3 == 0:  # a burst of sends, then wait for a receipt as a producer does
                await futures[-1]
        results = await asyncio.gather(*futures)
        await writer.close()
        assert completed == submitted
        return writer, results

    writer, results = asyncio.run(run())
    ids = [i for got in results for i in got]
    assert ids == sorted(ids) and len(ids) == 300
    assert writer.inline_batches > 0 and writer.batches > 0  # both paths ran
    stored = store.page(Q, None, 1000)
    # every old message removed, every send stored once, in order
    assert [(m.msgid_prod, m.msgid_seq) for m in stored] == [
        (producers[n // 100], n) for n in range(300)
    ]
