"""A sealed segment cut at a record boundary (a bad copy, a file system losing its tail) is
refused at start-up with the repair advice; after ``repair`` the store keeps what is left,
replaying from a checkpoint position that fell inside the part cut away."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from journal import JournalCorruptError, Position, repair
from journal.store import JournalUnusableError
from tests.conftest import count_rows
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory

Q = "queue://orders"


def test_a_cut_sealed_segment_is_refused_then_repaired_keeping_the_rest(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    store = make_journaled(directory, segment_size=4096)
    ends: list[Position] = []
    checkpointed: int | None = None
    for i in range(200):
        store.add([msg(Q, i, body=bytes(300))])
        ends.append(store.journal.position)
        same = [e for e in ends if e.segment == ends[-1].segment]
        if checkpointed is None and ends[-1].segment > 1 and len(same) == 2:
            store.checkpoint()  # its position is the end of message i's record
            checkpointed = i
        if checkpointed is not None and ends[-1].segment >= ends[checkpointed].segment + 2:
            break
    store.stop(checkpoint=False)
    assert checkpointed is not None
    segment = ends[checkpointed].segment
    # Cut it where message ``checkpointed`` starts: it and the rest of the segment go.
    path = directory / f"{segment:016d}.wal"
    os.truncate(path, ends[checkpointed - 1].offset)

    with pytest.raises(JournalUnusableError, match="cut short") as info:
        make_journaled(directory)
    assert isinstance(info.value.__cause__, JournalCorruptError)
    assert "mqstore journal repair" in str(info.value)

    plan = repair(directory, dry_run=False)
    assert [(a.action, a.file) for a in plan.actions] == [("fill", path.name)]
    assert plan.cut_records >= 1
    store = make_journaled(directory)
    kept = [m.msgid_seq for m in store.page(Q, None, 500)]
    later = [i for i, e in enumerate(ends) if e.segment > segment]
    assert kept == list(range(checkpointed + 1)) + later  # up to the checkpoint: database
    store.checkpoint()
    assert count_rows(engine, "activemq_msgs") == len(kept)
