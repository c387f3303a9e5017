"""Carries out a repair plan on disk: removals, stand-ins, padding, headers and cuts, durably."""

from __future__ import annotations

import os
from pathlib import Path

from journal.format import (
    FLAG_SEALS_PREVIOUS,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    SEAL_FRAME_SIZE,
    encode_header,
    encode_padding,
)
from journal.repair_plan import CREATE, FILL, HEADER, MARK, PAD, REMOVE, RepairPlan
from journal.repair_reads import read_segment, seal_frame, seal_in
from journal.segments import create_segment, fsync_directory, list_segments, mark_newest

__all__ = ["apply_plan"]


def apply_plan(directory: Path, plan: RepairPlan) -> None:
    """Make the changes of ``plan`` to the journal in ``directory`` and mark it applied."""
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
                view = read_segment(directory / action.file)
                flags = FLAG_SEALS_PREVIOUS if seal_frame(view, number - 1) is not None else 0
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
        start = HEADER_SIZE + (SEAL_FRAME_SIZE if seal_in(seg_path, number - 1) else 0)
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
