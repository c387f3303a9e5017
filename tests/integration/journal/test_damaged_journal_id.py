"""A damaged ``journal-id`` file: refused by name, never taken for another journal's id."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from journal.store import JournalIdLostError
from mqstore.errors import MqstoreError
from tests.conftest import count_rows
from tests.integration.journal.conftest import JournaledFactory, crashed_journal

Q = "queue://orders"

DAMAGED = {
    "empty": b"",
    "cut-short": b"3f2a9c1e-77",
    "zero-filled": bytes(37),
    "binary": b"\xff\xfe\x00junk",
    "junk": b"not a journal id\n",
}


@pytest.mark.parametrize("content", DAMAGED.values(), ids=DAMAGED.keys())
def test_a_damaged_id_file_is_refused_and_restoring_it_loses_nothing(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path, content: bytes
) -> None:
    directory = tmp_path / "j"
    crashed_journal(make_journaled, directory, 3, Q)  # acknowledged, only in the journal
    id_file = directory / "journal-id"
    original = id_file.read_bytes()
    id_file.write_bytes(content)
    with pytest.raises(JournalIdLostError, match="not a journal id") as info:
        make_journaled(directory)
    assert isinstance(info.value, MqstoreError) and str(id_file) in str(info.value)
    assert count_rows(engine, "activemq_msgs") == 0 and id_file.read_bytes() == content
    id_file.write_bytes(original)
    store = make_journaled(directory)
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [0, 1, 2]


def test_an_empty_journal_with_an_empty_id_file_gets_a_new_id(
    make_journaled: JournaledFactory, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    directory.mkdir()
    (directory / "journal-id").write_bytes(b"")
    store = make_journaled(directory)
    assert str(uuid.UUID(store.journal_id)) == store.journal_id
    assert (directory / "journal-id").read_text().strip() == store.journal_id
