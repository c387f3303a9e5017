"""What a journal repair changes and what it loses: its actions, its plan, and their summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from journal.format import HEADER_SIZE, SEGMENT_NAME_RE, Position
from journal.maintenance import Problem, jsonable

__all__ = [
    "CREATE",
    "FILL",
    "HEADER",
    "MARK",
    "PAD",
    "REMOVE",
    "TRUNCATE",
    "RepairAction",
    "RepairPlan",
]

PAD, TRUNCATE, REMOVE, HEADER, CREATE = "pad", "truncate", "remove", "header", "create"
#: A padding record written into a segment left empty before later ones (see EMPTY_SEGMENT).
MARK = "mark"
#: A padding record that fills a segment cut short back to the length its seal records.
FILL = "fill"


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
        lines.append(self._lost())
        return "\n".join(lines)

    @property
    def places(self) -> int:
        """The places changed: every action but the padding that fills a stand-in made for
        a missing segment (the same place as making it)."""
        made = {a.file for a in self.actions if a.action == CREATE}
        return sum(not (a.action in (FILL, MARK) and a.file in made) for a in self.actions)

    def _lost(self) -> str:
        """The summary line of what the repair loses (or lost, once applied)."""
        filled = {a.file for a in self.actions if a.action == FILL}
        missing = [a.file for a in self.actions if a.action == CREATE and a.file not in filled]
        parts = []
        if missing:  # nothing says how many records a missing segment without a seal held
            parts.append(
                f"every record of the missing segment(s) {', '.join(missing)} (how many, "
                "nothing left in the directory tells)"
            )
        if self.cut_records:
            parts.append(f"{self.cut_records} record(s) cut away or missing, as seals count")
        unreadable = self.lost_bytes - sum(
            a.end - a.offset for a in self.actions if a.action in (FILL, MARK)
        )
        if unreadable > 0:
            parts.append(f"whatever records the {unreadable} unreadable bytes held")
        types = ", ".join(f"{k}={v}" for k, v in sorted(self.lost_ops_by_type.items()))
        readable = f"{self.lost_records} readable records" + (f" ({types})" if types else "")
        what = f"{', '.join(parts)}, and {readable}" if parts else readable
        where = f"{self.places} place(s) {'repaired' if self.applied else 'to repair'}"
        return f"lost: {what} ({where})"


def _number(file: str) -> int | None:
    """The segment number of a segment file name, None for another file."""
    match = SEGMENT_NAME_RE.match(file)
    return int(match.group(1)) if match else None
