"""A journal whose disk is full: the write that finds no room starts a checkpoint, which
releases the segments behind it, instead of every write being refused until the next
checkpoint interval."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from mqstore.errors import MqstoreError
from tests.conftest import count_rows
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory

Q = "queue://orders"


def small_disk(monkeypatch: pytest.MonkeyPatch, directory: Path, limit: int) -> None:
    """Writes to the segments in ``directory`` find no room past ``limit`` bytes in all."""
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: bytes | memoryview, offset: int) -> int:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.endswith(".wal"):
            others = sum(p.stat().st_size for p in directory.glob("*.wal") if str(p) != path)
            room = limit - others - offset
            if len(data) > room:
                if room > 0:
                    real_pwrite(fd, bytes(data)[:room], offset)
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)


def test_a_write_refused_for_a_full_disk_starts_a_checkpoint_that_makes_room(
    make_journaled: JournaledFactory,
    engine: Engine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    directory = tmp_path / "j"
    store = make_journaled(directory, segment_size=8192)  # checkpoints: every hour
    small_disk(monkeypatch, directory, 48 * 1024)
    added: list[int] = []
    with pytest.raises(MqstoreError, match="no space"):
        for i in range(1000):
            added += store.add([msg(Q, i, body=bytes(1000))])
    assert len(added) > 8  # more than one segment holds
    deadline = time.monotonic() + 30  # a bound on the wait, far below the hour
    while len(list(directory.glob("*.wal"))) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(list(directory.glob("*.wal"))) == 1  # released behind the checkpoint
    assert count_rows(engine, "activemq_msgs") == len(added)
    added += store.add([msg(Q, 1000, body=bytes(1000))])
    assert [m.id for m in store.page(Q, None, 2000)] == added
