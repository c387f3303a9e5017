"""Which mode, plain or prioritized, a journal's records were written in.

The two modes read durable subscriptions differently, so a record means something else in
the other one: an add carries the store priority (0 for every add of a plain store), an ack
moves the ACKS row of its priority (prioritized) or every row of the subscription (plain).
Replayed in the other mode, adds of a prioritized store are passed over by a plain one's
reads and then acknowledged away, and a prioritized ack moves every row, losing the other
priorities' messages. So a journal holding records the database does not have yet opens
only in the mode it was written in; one with nothing to replay opens in either.

The mode is kept in ``<journal>/mode.json``, written durably before anything is journaled
in it. A journal of a build before this file has none: its records tell the mode where
they can (an add or ack with a store priority above 0, or a subscription made, says which
store wrote it); where they cannot, the mode it is opened in is taken, the one its broker
most likely ran in, and the file written.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from journal.records import AckSubscription, AddMessage, AddSubscription, Op
from journal.support import JournalModeMismatchError

__all__ = [
    "MODE_FILE",
    "mismatch",
    "mode_name",
    "read_mode",
    "settle_mode",
    "write_mode",
    "written_mode",
]

MODE_FILE = "mode.json"
SETTING = "MQSTORE_PRIORITIZED_MESSAGES"

log = logging.getLogger(__name__)


def mode_name(prioritized: bool) -> str:
    """``"prioritized"`` or ``"plain"``."""
    return "prioritized" if prioritized else "plain"


def read_mode(directory: Path) -> bool | None:
    """True (prioritized) or False (plain) as ``mode.json`` records it; None when there is
    no such file (a journal of an earlier build) or it holds no mode."""
    path = directory / MODE_FILE
    try:
        stored = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s is unreadable (%s): the journal's mode is told from its records", path, exc)
        return None
    mode = stored.get("mode") if isinstance(stored, dict) else None
    if mode not in ("plain", "prioritized"):
        log.warning("%s holds no mode: the journal's mode is told from its records", path)
        return None
    return bool(mode == "prioritized")


def write_mode(directory: Path, prioritized: bool) -> None:
    """Record the mode durably (write, fsync, rename, fsync the directory)."""
    path = directory / MODE_FILE
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump({"mode": mode_name(prioritized)}, fh)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def written_mode(records: Iterable[Sequence[Op]]) -> tuple[bool | None, int]:
    """The mode ``records`` show they were written in (None when none tells) and how many
    records there are. A plain store gives every add and ack store priority 0."""
    count = 0
    shown: bool | None = None
    for ops in records:
        count += 1
        if shown is True:
            continue
        for op in ops:
            if type(op) is AddSubscription:
                shown = shown or op.prioritized
            elif (type(op) is AddMessage or type(op) is AckSubscription) and op.priority:
                shown = True
            if shown:
                break
    return shown, count


def settle_mode(directory: Path, prioritized: bool, pending: Iterable[Sequence[Op]]) -> None:
    """Open the journal in ``directory`` in mode ``prioritized`` and record that mode, or
    raise :class:`JournalModeMismatchError` when records still to replay (``pending``, read
    only as far as needed) were written in the other mode."""
    stored = read_mode(directory)
    if stored == prioritized:
        return
    if stored is not None:
        if next(iter(pending), None) is not None:
            raise mismatch(directory, written=stored, opened=prioritized)
    else:
        shown, count = written_mode(pending)
        if shown is not None and shown != prioritized:
            raise mismatch(directory, written=shown, opened=prioritized, told=True)
        if count and shown is None:
            log.warning(
                "the journal in %s does not record the mode its %d record(s) to replay were "
                "written in, and they do not show it: replaying them in %s mode, this "
                "broker's (%s)",
                directory,
                count,
                mode_name(prioritized),
                SETTING,
            )
    write_mode(directory, prioritized)


def mismatch(
    directory: Path, *, written: bool, opened: bool, told: bool = False
) -> JournalModeMismatchError:
    """The refusal of a journal written in mode ``written`` opened in mode ``opened``."""
    was, now = mode_name(written), mode_name(opened)
    how = " (its records show it)" if told else ""
    return JournalModeMismatchError(
        f"the journal in {directory} holds records not yet applied to the database that a "
        f"broker in {was} mode wrote{how}, but this broker runs in {now} mode ({SETTING}="
        f"{str(opened).lower()}): replayed in {now} mode, their priorities and "
        "acknowledgements would mean something else and messages would be lost. Start once "
        f"in {was} mode ({SETTING}={str(written).lower()}) and stop the broker cleanly (its "
        "final checkpoint applies the whole journal to the database), then switch to "
        f"{now} mode."
    )
