"""Plans the repair of each segment: which stretches are padded, cut, filled or marked,
and what is lost with them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from journal.errors import JournalDecodeError
from journal.format import FRAME_OVERHEAD, HEADER_SIZE, RECORD_PADDING, SEAL_FRAME_SIZE, Seal
from journal.frames import FrameWalker, all_zero
from journal.maintenance import Problem, count_frames, resync
from journal.reader import EMPTY_SEGMENT, check_header
from journal.records import decode_batch
from journal.repair_plan import FILL, HEADER, MARK, PAD, REMOVE, TRUNCATE, RepairAction, RepairPlan
from journal.repair_reads import read_segment
from journal.scans import SegmentScan
from journal.seals import UNSEALED, UNSEALED_CUT, cut_short, ran_on, read_seal, runs_on, unsealed
from journal.segments import read_newest

__all__ = ["RepairPlanner"]


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


class RepairPlanner:
    """Builds a :class:`RepairPlan` segment by segment, counting the records lost by type."""

    def __init__(self, plan: RepairPlan) -> None:
        self.plan = plan
        self.lost: Counter[str] = Counter()

    def add(self, action: str, path: Path, offset: int, end: int, reason: str) -> None:
        """Plan one change; the first one planned names the journal's problem."""
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
        """Plan removing a segment after the cut, counting what it held as lost."""
        view = read_segment(path)
        self.add(REMOVE, path, 0, len(view), "after the cut")
        self.plan.lost_bytes += len(view)
        self.plan.lost_records += count_frames(view, HEADER_SIZE, self.lost)


def _damaged(view: memoryview, offset: int) -> int:
    """Bytes lost by cutting the segment at ``offset``: up to the end of the damaged record
    there when only zero bytes, the writer's free space, follow it; else to the end."""
    walker = FrameWalker(view, offset)
    next(iter(walker), None)
    end = walker.bad_end
    return end - offset if end is not None and all_zero(view[end:]) else len(view) - offset


def _frames(view: memoryview) -> int:
    """Valid records of a segment (its seal not counted), as the seal counts them."""
    if len(view) < HEADER_SIZE:
        return 0
    start = HEADER_SIZE + (SEAL_FRAME_SIZE if read_seal(view) is not None else 0)
    return sum(1 for _ in FrameWalker(view, start))
