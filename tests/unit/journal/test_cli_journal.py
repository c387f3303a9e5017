"""``mqstore journal inspect`` and ``repair`` as a user runs them on a damaged journal."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from journal import AddMessage, Journal


def mqstore(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mqstore", *args], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def _journal_with_damage(directory: Path) -> None:
    with Journal.open(directory) as journal:
        for i in range(5):
            journal.append([AddMessage(i, "queue://q", "ID:p:1:1", i, 0, 4, b"x" * 100)])
    [segment] = sorted(directory.glob("*.wal"))
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a bad record in the middle of the log
    segment.write_bytes(bytes(data))


def test_inspect_then_repair_a_corrupt_journal(tmp_path: Path) -> None:
    healthy = tmp_path / "healthy"
    with Journal.open(healthy) as journal:
        journal.append([AddMessage(1, "queue://q", "ID:p:1:1", 1, 0, 4, b"body")])
    report = json.loads(mqstore("journal", "inspect", str(healthy), "--json").stdout)
    assert report["records"] == 1

    damaged = tmp_path / "damaged"
    _journal_with_damage(damaged)
    found = json.loads(mqstore("journal", "inspect", str(damaged), "--json").stdout)
    assert found["problem"] is not None
    before = sorted(p.read_bytes() for p in damaged.glob("*.wal"))
    dry = mqstore("journal", "repair", str(damaged), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "record" in dry.stdout.lower()
    assert before == sorted(p.read_bytes() for p in damaged.glob("*.wal"))  # dry run wrote nothing
    fixed = mqstore("journal", "repair", str(damaged))
    assert fixed.returncode == 0, fixed.stderr
    with Journal.open(damaged) as journal:  # opens again: the damage was cut away
        kept = [ops[0].id for _, ops in journal.recover()]  # type: ignore[union-attr]
    assert kept == sorted(kept) and len(kept) < 5


def test_inspect_and_repair_of_a_path_that_is_no_directory_say_so(tmp_path: Path) -> None:
    """A mistyped path: a usage error naming it (not an OS error about a file inside it,
    "Not a directory: .../newest"), and nothing is made there."""
    afile = tmp_path / "segment.wal"
    afile.write_bytes(b"not a journal")
    for args, said in [
        (("inspect", str(afile)), "is a file"),
        (("repair", str(afile)), "is a file"),
        (("inspect", str(tmp_path / "missing")), "does not exist"),
        (("repair", str(tmp_path / "missing"), "--dry-run"), "does not exist"),
    ]:
        result = mqstore("journal", *args)
        assert result.returncode == 2, result
        # The usage error's box wraps at the terminal's width, wherever the path ends.
        words = " ".join(re.sub("[│╭╮╰╯─]", " ", result.stderr).split())
        assert said in words and "DIRECTORY" in words, result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "missing").exists()
