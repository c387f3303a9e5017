"""``repair``: cut damage out of a journal, keeping every record that can still be read.

A damaged stretch inside a segment (a record whose checksum fails, one that does not decode,
garbage) is overwritten by a padding record of the same length, so the records after it
keep their positions (a checkpoint position stored in the database stays valid) and are
replayed; so is a whole record at the end of the log that no longer checks out (the log
still reaches the position after it, where the database's checkpoint may be). Where
nothing readable follows in its segment otherwise, the segment is cut there instead;
a segment header that does not check out is written again, and a segment missing from the
middle is created empty. A segment left without records before later ones gets a padding
record: one holding none is taken for damage (its records cut away). Only where the damage
cannot be told apart from a different log (a header naming another segment, a long run of
missing numbers, damage too short to pad) is the journal truncated and the later segments
removed. A segment shorter than the seal the next one starts with says it was (cut at a
record boundary: by a bad copy, a lost tail) is filled up to that length with a padding
record, its records cut away reported lost; a stand-in for a missing segment is too, and a
stretch with nothing readable after it in such a segment is padded up to it, not cut. A
segment longer than its seal records is cut back to its sealed end (to the start of the
record that runs past it, then filled up to it): what was written after the writer moved
on is not in the log's order; the records cut off are counted lost, by type.
Zero bytes after the last record are the writer's preallocated space, no damage:
``Journal.open`` trims them (after a damaged last record they are not counted lost).
"""

from __future__ import annotations

import os
from pathlib import Path

from journal.format import FRAME_OVERHEAD, HEADER_SIZE, Position, segment_file_name
from journal.repair_execution import apply_plan
from journal.repair_plan import CREATE, FILL, REMOVE, RepairAction, RepairPlan
from journal.repair_planner import RepairPlanner
from journal.repair_reads import read_segment, seal_in
from journal.segments import (
    NEWEST_FILE_NAME,
    DirectoryLock,
    list_segments,
    missing_after,
    read_newest,
    segment_path,
)

__all__ = ["RepairAction", "RepairPlan", "repair"]

#: More missing segments than this in a row are not a lost file but a different log.
MAX_MISSING = 1000


def repair(
    directory: str | os.PathLike[str],
    *,
    dry_run: bool = True,
    database_position: Position | None = None,
) -> RepairPlan:
    """Plan (and unless ``dry_run`` apply) the repair of the journal in ``directory``.

    ``database_position``: the checkpoint position the database has applied for this
    journal, if known; the plan then tells damage wholly before it, which loses nothing
    (:attr:`RepairPlan.lost_applied_only`). Takes the directory lock, so it refuses to run
    while a server has the journal open (:class:`~journal.errors.JournalLockedError`).
    """
    path = Path(directory)
    plan = RepairPlan(path, database_position=database_position)
    planner = RepairPlanner(plan)
    with DirectoryLock(path):
        segments = list_segments(path)
        prev: int | None = None
        for i, (number, seg_path) in enumerate(segments):
            view = read_segment(seg_path)
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            sealed = seal_in(nxt[1], number) if nxt is not None else None
            if prev is not None and number != prev + 1:
                reason = f"gap in segment numbers: segment {prev} is followed by {number}"
                if number - prev - 1 > MAX_MISSING:
                    planner.cut(seg_path, view, 0, reason)
                    ok = False
                else:  # empty stand-ins for the missing ones; the records after them stay
                    for missing in range(prev + 1, number):
                        planner.add(CREATE, seg_path.with_name(segment_file_name(missing)),
                                    0, 0, f"missing segment; {reason}")  # fmt: skip
                    _fill_stand_in(planner, seg_path, number)
                    ok = planner.segment(number, seg_path, view, not nxt, sealed)
            else:
                ok = planner.segment(number, seg_path, view, not nxt, sealed)
            prev = number
            if not ok:
                for _n, later in segments[i + 1 :]:
                    planner.remove(later)
                break
        else:
            _plan_missing_tail(planner, path, prev)
        plan.lost_ops_by_type = dict(planner.lost)
        if not dry_run and plan.actions:
            apply_plan(path, plan)
    return plan


def _fill_stand_in(planner: RepairPlanner, path: Path, number: int) -> None:
    """Fill the stand-in for missing segment ``number - 1`` up to the length the seal
    ``path`` starts with records for it, so it is not then taken for one cut short."""
    seal = seal_in(path, number - 1)
    if seal is None or seal.end - HEADER_SIZE < FRAME_OVERHEAD:
        return
    stand_in = path.with_name(segment_file_name(number - 1))
    reason = f"missing segment; its seal says it held {seal.records} record(s)"
    planner.plan.actions.append(RepairAction(FILL, stand_in.name, HEADER_SIZE, seal.end, reason))
    planner.plan.cut_records += seal.records


def _plan_missing_tail(planner: RepairPlanner, directory: Path, last: int | None) -> None:
    """Empty stand-ins for the newest segments the directory recorded making that are gone
    after ``last`` (its file ``newest`` is dropped instead when it names a segment too far
    beyond the log to be a lost file)."""
    missing = missing_after(read_newest(directory), last)
    if not missing:
        return
    reason = f"missing segment; the journal made segments up to {missing[-1]}"
    if len(missing) > MAX_MISSING:
        marker = directory / NEWEST_FILE_NAME
        planner.add(REMOVE, marker, 0, 0, f"{marker.name} names segment {missing[-1]}: {reason}")
        return
    for number in missing:
        planner.add(CREATE, segment_path(directory, number), 0, 0, reason)
