"""A broker that starts on a new journal while the last one's broker did not stop cleanly
(a journal directory on storage that did not survive a redeploy): it is refused, since
what that broker acknowledged after its last checkpoint lives only in the old journal.
A clean stop, starting the old journal again, or `mqstore journal forget` let it start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from journal.support import JournalLeftRunningError
from tests.conftest import count_rows
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory, crashed_journal

Q = "queue://orders"


def _left_running(make_journaled: JournaledFactory, directory: Path, count: int) -> str:
    """A journal whose broker acknowledged ``count`` adds and died before a checkpoint."""
    crashed_journal(make_journaled, directory, count, Q)
    return (directory / "journal-id").read_text().strip()


def test_a_new_journal_is_refused_while_the_last_one_holds_unapplied_writes(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    lost = _left_running(make_journaled, tmp_path / "old", 3)
    with pytest.raises(JournalLeftRunningError) as refused:
        make_journaled(tmp_path / "new")
    text = str(refused.value)
    assert f"journal {lost} of broker" in text and "did not stop cleanly" in text
    assert f"mqstore journal forget {lost}" in text and "--journal-dir" in text
    assert count_rows(engine, "activemq_msgs") == 0  # nothing of the new start was written

    old = make_journaled(tmp_path / "old")  # the old journal again: its writes are applied
    assert [m.msgid_seq for m in old.page(Q, None, 10)] == [0, 1, 2]
    old.stop()
    assert count_rows(engine, "activemq_msgs") == 3
    new = make_journaled(tmp_path / "new")  # stopped cleanly: nothing is left behind
    assert [m.msgid_seq for m in new.page(Q, None, 10)] == [0, 1, 2]


def test_a_clean_stop_lets_a_new_journal_start(
    make_journaled: JournaledFactory, tmp_path: Path
) -> None:
    store = make_journaled(tmp_path / "old")
    [first] = store.add([msg(Q, 0)])
    store.add([msg(Q, 1)])
    store.remove(Q, [first])
    store.stop()
    new = make_journaled(tmp_path / "new")
    assert [m.msgid_seq for m in new.page(Q, None, 10)] == [1]


def test_a_journal_running_again_is_refused_until_it_stops_cleanly(
    make_journaled: JournaledFactory, tmp_path: Path
) -> None:
    """Stopped cleanly once, then started and killed again: running again."""
    store = make_journaled(tmp_path / "old")
    store.add([msg(Q, 0)])
    store.stop()
    again = make_journaled(tmp_path / "old")
    again.add([msg(Q, 1)])
    again.stop(checkpoint=False)
    with pytest.raises(JournalLeftRunningError):
        make_journaled(tmp_path / "new")


def test_forget_accepts_the_loss_and_lets_a_new_journal_start(
    make_journaled: JournaledFactory, dsn: str, tmp_path: Path
) -> None:
    lost = _left_running(make_journaled, tmp_path / "old", 2)
    cli = [sys.executable, "-m", "mqstore", "journal", "forget", lost, "--dsn", dsn]
    unconfirmed = subprocess.run(cli, capture_output=True, text=True, check=False)
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    with pytest.raises(JournalLeftRunningError):
        make_journaled(tmp_path / "new")
    done = subprocess.run([*cli, "--yes"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    new = make_journaled(tmp_path / "new")
    assert new.page(Q, None, 10) == []  # the loss was accepted
    again = subprocess.run([*cli, "--yes"], capture_output=True, text=True, check=False)
    assert again.returncode == 2 and "nothing to forget" in again.stderr
