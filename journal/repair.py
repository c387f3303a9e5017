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
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from journal.errors import JournalDecodeError
from journal.format import (
    FLAG_SEALS_PREVIOUS,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    RECORD_PADDING,
    SEAL_FRAME_SIZE,
    SEGMENT_NAME_RE,
    Position,
    Seal,
    decode_header,
    decode_seal,
    encode_header,
    encode_padding,
    header_flags,
    segment_file_name,
)
from journal.frames import FrameWalker, all_zero
from journal.maintenance import Problem, count_frames, jsonable, resync
from journal.reader import EMPTY_SEGMENT, check_header
from journal.records import decode_batch
from journal.scans import SegmentScan
from journal.seals import UNSEALED, UNSEALED_CUT, cut_short, ran_on, read_seal, runs_on, unsealed
from journal.segments import (
    NEWEST_FILE_NAME,
    DirectoryLock,
    create_segment,
    fsync_directory,
    list_segments,
    mark_newest,
    missing_after,
    read_newest,
    segment_path,
)

__all__ = ["RepairAction", "RepairPlan", "repair"]

PAD, TRUNCATE, REMOVE, HEADER, CREATE = "pad", "truncate", "remove", "header", "create"
#: A padding record written into a segment left empty before later ones (see EMPTY_SEGMENT).
MARK = "mark"
#: A padding record that fills a segment cut short back to the length its seal records.
FILL = "fill"
#: More missing segments than this in a row are not a lost file but a different log.
MAX_MISSING = 1000


@dataclass(frozen=True, slots=True)
class RepairAction:
    """One change: ``pad`` bytes ``offset..end`` of ``file``, ``truncate`` it at ``offset``
    (dropping up to ``end``), ``remove`` it, write its ``header`` again, ``create`` it
    empty in place of a missing segment, ``mark`` it, found empty before later segments,
    with a padding record at ``offset..end``, or ``fill`` it, cut short of the length its
    seal records, with a padding record from ``offset`` (its end) to ``end``."""

    action: str
    file: str
    offset: int
    end: int
    reason: str


@dataclass(slots=True)
class RepairPlan:
    """What ``repair`` would change (or changed, when ``applied``) and what is lost."""

    directory: Path
    problem: Problem | None = None
    actions: list[RepairAction] = field(default_factory=list)
    lost_bytes: int = 0
    lost_records: int = 0
    cut_records: int = 0
    lost_ops_by_type: dict[str, int] = field(default_factory=dict)
    applied: bool = False
    #: The checkpoint position the database has applied, when the caller read it.
    database_position: Position | None = None

    @property
    def lost_applied_only(self) -> bool:
        """Whether every damaged stretch lies before ``database_position``: the records
        there are in the database already, and repairing keeps the journal reaching it
        (stretches padded in place, or segments before its segment cut), so nothing is lost."""
        at = self.database_position
        if at is None or not self.actions:
            return False
        for a in self.actions:
            number = _number(a.file)
            if a.action == PAD and number is not None and Position(number, a.end) <= at:
                continue
            if a.action == TRUNCATE and number is not None and number < at.segment:
                continue
            if a.action != HEADER or number is None or Position(number, HEADER_SIZE) > at:
                return False
        return True

    @property
    def remove_files(self) -> list[str]:
        """Segment files removed, oldest first."""
        return [a.file for a in self.actions if a.action == REMOVE]

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return dict(jsonable(self))

    def describe(self) -> str:
        """Human-readable summary for the command line."""
        if self.problem is None:
            return f"journal {self.directory} is intact; nothing to repair"
        p = self.problem
        done = self.applied
        lines = [f"{p.kind} in {p.file} at offset {p.offset}: {p.reason}"]
        for a in self.actions:
            if a.action == PAD:
                what = f"{'padded' if done else 'would pad'} {a.file} bytes {a.offset}..{a.end}"
                lines.append(f"{what} ({a.reason}); the records after them are kept")
            elif a.action == TRUNCATE:
                what = f"{'truncated' if done else 'would truncate'} {a.file} at {a.offset}"
                lines.append(what if a.reason == p.reason else f"{what} ({a.reason})")
            elif a.action == HEADER:
                lines.append(f"{'rewrote' if done else 'would rewrite'} the header of {a.file}")
            elif a.action == CREATE:
                what = "created" if done else "would create"
                lines.append(f"{what} an empty {a.file} for the missing one (its records are lost)")
            elif a.action == FILL:
                what = "filled" if done else "would fill"
                lines.append(
                    f"{what} {a.file} bytes {a.offset}..{a.end} with a padding record ("
                    f"{a.reason}); the records cut away are lost, the later segments are kept"
                )
            elif a.action == MARK:
                what = "marked" if done else "would mark"
                lines.append(
                    f"{what} {a.file} as emptied with a padding record (whatever records it "
                    "held are lost; the later segments are kept)"
                )
            else:
                lines.append(f"{'removed' if done else 'would remove'} {a.file}")
        if self.lost_applied_only:
            lines.append(
                f"lost: nothing; the damaged bytes all lie before {self.database_position}, "
                "the position the database has applied: the records they held are in the "
                "database already"
            )
            return "\n".join(lines)
        types = ", ".join(f"{k}={v}" for k, v in sorted(self.lost_ops_by_type.items()))
        stretches = sum(a.action not in (HEADER, MARK) for a in self.actions)
        cut = f", {self.cut_records} record(s) cut away" if self.cut_records else ""
        lines.append(
            f"lost: whatever records the {self.lost_bytes} unreadable bytes held ({stretches} "
            f"place(s)){cut}, and {self.lost_records} readable records"
            + (f" ({types})" if types else "")
        )
        return "\n".join(lines)


def _first_bad(view: memoryview, start: int) -> tuple[int, str, bool, int | None, int | None]:
    """Where the frames from ``start`` stop: (offset, reason, torn-shaped, end of a bad
    frame that is whole but does not decode, end of a whole frame whose checksum or type
    fails), or offset -1 when they reach the end."""
    walker = FrameWalker(view, start)
    for frame in walker:
        if frame.record_type == RECORD_PADDING:
            continue
        try:
            decode_batch(frame.payload)
        except JournalDecodeError as exc:
            return frame.start, f"undecodable record: {exc}", False, frame.end, frame.end
    if walker.problem is None:
        return -1, "", False, None, None
    offset, reason, torn = walker.problem
    return offset, reason, torn, None, walker.bad_end


class _Planner:
    def __init__(self, plan: RepairPlan) -> None:
        self.plan = plan
        self.lost: Counter[str] = Counter()

    def add(self, action: str, path: Path, offset: int, end: int, reason: str) -> None:
        self.plan.actions.append(RepairAction(action, path.name, offset, end, reason))
        if self.plan.problem is None:
            kinds = {"torn": "torn-tail", "missing": "missing"}
            kind = kinds.get(reason.split(" ", 1)[0], "corrupt")
            stem = path.name.split(".")[0]
            number = int(stem) if stem.isdigit() else 0
            self.plan.problem = Problem(kind, number, path.name, offset, end - offset, reason)

    def segment(
        self, number: int, path: Path, view: memoryview, last: bool, sealed: Seal | None
    ) -> bool:
        """Plan the repair of one segment (``sealed``: its seal, found at the start of the
        next one); False when the later segments must go."""
        size = len(view)
        damage = check_header(number, path, view, last)
        start = HEADER_SIZE
        if damage is None and last and unsealed(view):
            made = (read_newest(path.parent) or 0) >= number
            self.add(REMOVE, path, 0, size, UNSEALED_CUT if made else f"torn header: {UNSEALED}")
            self.plan.lost_bytes += size
            return True
        if damage is None and read_seal(view) is not None:
            start += SEAL_FRAME_SIZE
        if damage is not None:
            if damage.torn:  # a new last segment whose header was never written
                self.add(REMOVE, path, 0, size, f"torn header: {damage.reason}")
                self.plan.lost_bytes += size
                return True
            if "file name says" in damage.reason:
                self.cut(path, view, 0, damage.reason)
                return False
            self.add(HEADER, path, 0, HEADER_SIZE, damage.reason)
            if size < HEADER_SIZE:
                if sealed is not None and not last:
                    self.fill(number, path, view, sealed)
                return True
        at = runs_on(view, start, sealed) if sealed is not None and sealed.end >= start else None
        if sealed is not None and at is not None:
            # Bytes past its sealed end are not in the log's order: cut off, their records
            # reported lost; the segment is then repaired up to its sealed end.
            reason = f"past its sealed end, {sealed.end}: out of the log's order"
            if self.plan.problem is None:  # the first problem: the whole story
                reason = ran_on(number, path, sealed, at, view).reason
            self.cut(path, view, at, reason)
            view, size = view[:at], at
        pos = start
        while True:
            offset, reason, torn, bad_end, whole_end = _first_bad(view, pos)
            if offset < 0 and sealed is not None and self.fill(number, path, view, sealed):
                return True
            if offset < 0 and size == start and damage is None and not last:
                # Whatever it held is lost; a padding record tells it from damage from now on.
                self.add(MARK, path, start, start + FRAME_OVERHEAD, EMPTY_SEGMENT)
                return True
            if offset < 0:
                return True
            if torn and last and not bytes(view[offset:]).strip(b"\0"):
                return True  # the writer's zero-filled space: free, and Journal.open trims it
            if torn and last:
                self.add(TRUNCATE, path, offset, size, f"torn tail: {reason}")
                self.plan.lost_bytes += _damaged(view, offset)
                return True
            end = bad_end if bad_end is not None else resync(view, offset + 1)
            if end is None and whole_end is not None:
                # A whole record damaged since it was written, with nothing readable after
                # it: padded over, not cut, so the log still reaches its end, which the
                # database's checkpoint position may be at already.
                end = whole_end
            if (
                end is None
                and sealed is not None
                and size <= sealed.end
                and sealed.end - offset >= FRAME_OVERHEAD
            ):  # pad up to the length its seal records, not cut: its seal then still holds
                self.add(PAD, path, offset, sealed.end, f"{reason}; up to its sealed end")
                self.plan.lost_bytes += sealed.end - offset
                return True
            if end is None:  # nothing readable follows in this segment
                self.add(TRUNCATE, path, offset, size, reason)
                self.plan.lost_bytes += _damaged(view, offset)
                return True
            if end - offset < FRAME_OVERHEAD:
                self.cut(path, view, offset, reason)
                return False
            self.add(PAD, path, offset, end, reason)
            self.plan.lost_bytes += end - offset
            pos = end

    def fill(self, number: int, path: Path, view: memoryview, sealed: Seal) -> bool:
        """Plan filling a segment, readable to its end, up to its sealed length, if it is
        cut short of it; whether it is. One left without records is ``mark``-ed so, the
        damage start-up reports for it being that it holds none."""
        size = max(len(view), HEADER_SIZE)
        seg = SegmentScan(number, path, size, records=_frames(view))
        damage = cut_short(seg, sealed)
        if damage is None or sealed.end - size < FRAME_OVERHEAD:
            return False
        if seg.records:
            self.add(FILL, path, size, sealed.end, damage.reason)
        else:
            self.add(MARK, path, size, sealed.end, EMPTY_SEGMENT)
        self.plan.lost_bytes += sealed.end - size
        self.plan.cut_records += max(0, sealed.records - seg.records)
        return True

    def cut(self, path: Path, view: memoryview, offset: int, reason: str) -> None:
        """Truncate at ``offset`` (remove the file at 0), counting what is lost."""
        action = REMOVE if offset == 0 else TRUNCATE
        self.add(action, path, offset, len(view), reason)
        self.plan.lost_bytes += len(view) - offset
        self.plan.lost_records += count_frames(view, max(offset, HEADER_SIZE), self.lost)

    def remove(self, path: Path) -> None:
        view = _read(path)
        self.add(REMOVE, path, 0, len(view), "after the cut")
        self.plan.lost_bytes += len(view)
        self.plan.lost_records += count_frames(view, HEADER_SIZE, self.lost)


def _number(file: str) -> int | None:
    """The segment number of a segment file name, None for another file."""
    match = SEGMENT_NAME_RE.match(file)
    return int(match.group(1)) if match else None


def _damaged(view: memoryview, offset: int) -> int:
    """Bytes lost by cutting the segment at ``offset``: up to the end of the damaged record
    there when only zero bytes, the writer's free space, follow it; else to the end."""
    walker = FrameWalker(view, offset)
    next(iter(walker), None)
    end = walker.bad_end
    return end - offset if end is not None and all_zero(view[end:]) else len(view) - offset


def _read(path: Path) -> memoryview:
    with open(path, "rb") as f:
        return memoryview(f.read())


def _frames(view: memoryview) -> int:
    """Valid records of a segment (its seal not counted), as the seal counts them."""
    if len(view) < HEADER_SIZE:
        return 0
    start = HEADER_SIZE + (SEAL_FRAME_SIZE if read_seal(view) is not None else 0)
    return sum(1 for _ in FrameWalker(view, start))


def _seal_in(path: Path, number: int) -> Seal | None:
    """The seal of segment ``number`` that the segment file ``path`` (the next one) starts
    with, if any; also behind a damaged header, which is written again keeping it."""
    with open(path, "rb") as f:
        view = memoryview(f.read(HEADER_SIZE + SEAL_FRAME_SIZE))
    try:
        if decode_header(view) != number + 1 or not header_flags(view) & FLAG_SEALS_PREVIOUS:
            return None
    except ValueError:
        pass
    return _seal_frame(view, number)


def _seal_frame(view: memoryview, number: int) -> Seal | None:
    """The seal of segment ``number`` after the (maybe damaged) header in ``view``."""
    frame = next(iter(FrameWalker(view[: HEADER_SIZE + SEAL_FRAME_SIZE])), None)
    if frame is None or frame.record_type != RECORD_PADDING:
        return None
    seal = decode_seal(frame.payload)
    return seal if seal is not None and seal.segment == number else None


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
    planner = _Planner(plan)
    with DirectoryLock(path):
        segments = list_segments(path)
        prev: int | None = None
        for i, (number, seg_path) in enumerate(segments):
            view = _read(seg_path)
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            sealed = _seal_in(nxt[1], number) if nxt is not None else None
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
            _apply(path, plan)
    return plan


def _fill_stand_in(planner: _Planner, path: Path, number: int) -> None:
    """Fill the stand-in for missing segment ``number - 1`` up to the length the seal
    ``path`` starts with records for it, so it is not then taken for one cut short."""
    seal = _seal_in(path, number - 1)
    if seal is None or seal.end - HEADER_SIZE < FRAME_OVERHEAD:
        return
    stand_in = path.with_name(segment_file_name(number - 1))
    reason = f"missing segment; its seal says it held {seal.records} record(s)"
    planner.plan.actions.append(RepairAction(FILL, stand_in.name, HEADER_SIZE, seal.end, reason))
    planner.plan.cut_records += seal.records


def _plan_missing_tail(planner: _Planner, directory: Path, last: int | None) -> None:
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


def _apply(directory: Path, plan: RepairPlan) -> None:
    # Removals newest first, so a crash during repair still leaves a gap-free prefix.
    for action in reversed(plan.actions):
        if action.action == REMOVE:
            (directory / action.file).unlink()
    for action in plan.actions:
        if action.action == CREATE:
            os.close(create_segment(directory, int(action.file.split(".")[0])))
        if action.action in (REMOVE, CREATE):
            continue
        fd = os.open(directory / action.file, os.O_WRONLY)
        try:
            if action.action in (PAD, MARK, FILL):
                os.pwrite(fd, encode_padding(action.end - action.offset), action.offset)
            elif action.action == HEADER:  # keeping the flag of a seal that follows it
                number = int(action.file.split(".")[0])
                view = _read(directory / action.file)
                flags = FLAG_SEALS_PREVIOUS if _seal_frame(view, number - 1) is not None else 0
                os.pwrite(fd, encode_header(number, flags), 0)
                if os.fstat(fd).st_size < HEADER_SIZE:
                    os.ftruncate(fd, HEADER_SIZE)
            else:
                os.ftruncate(fd, action.offset)
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_directory(directory)
    remaining = list_segments(directory)
    for number, seg_path in remaining[:-1]:
        start = HEADER_SIZE + (SEAL_FRAME_SIZE if _seal_in(seg_path, number - 1) else 0)
        if seg_path.stat().st_size == start:
            _mark_empty(seg_path, start)
    if remaining:  # segments cut off are no longer missing: the log ends where it now ends
        mark_newest(directory, remaining[-1][0])
    plan.applied = True


def _mark_empty(path: Path, start: int) -> None:
    """Give a segment left empty before later ones (a stand-in for a missing one, or one
    cut to its header and seal) a padding record: a segment with none is taken for damage."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, encode_padding(FRAME_OVERHEAD), start)
        os.fsync(fd)
    finally:
        os.close(fd)
