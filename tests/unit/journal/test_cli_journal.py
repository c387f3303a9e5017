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


def _segmented_journal(directory: Path) -> list[Path]:
    with Journal.open(directory, segment_size=8192) as journal:
        for i in range(40):
            journal.append([AddMessage(i, "queue://q", "ID:p:1:1", i, 0, 4, b"x" * 600)])
    return sorted(directory.glob("*.wal"))


def test_inspect_exits_non_zero_when_it_finds_damage(tmp_path: Path) -> None:
    healthy = tmp_path / "healthy"
    with Journal.open(healthy) as journal:
        journal.append([AddMessage(1, "queue://q", "ID:p:1:1", 1, 0, 4, b"body")])
    for extra in ([], ["--json"]):
        assert mqstore("journal", "inspect", str(healthy), *extra).returncode == 0
    damaged = tmp_path / "damaged"
    _journal_with_damage(damaged)
    shown = mqstore("journal", "inspect", str(damaged))
    assert shown.returncode == 1, shown.stderr
    assert "damage: corrupt" in shown.stdout
    as_json = mqstore("journal", "inspect", str(damaged), "--json")
    assert as_json.returncode == 1, as_json.stderr
    assert json.loads(as_json.stdout)["problem"]["kind"] == "corrupt"
    usage = " ".join(mqstore("journal", "inspect", "--help").stdout.split())
    assert "Exit codes: 0 no damage" in usage and "1 damage found" in usage


def test_repair_of_a_deleted_newest_segment_says_its_records_are_lost(tmp_path: Path) -> None:
    newest = _segmented_journal(tmp_path)[-1]
    newest.unlink()
    dry = mqstore("journal", "repair", str(tmp_path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    text = " ".join(dry.stdout.split())
    assert f"lost: every record of the missing segment(s) {newest.name}" in text
    assert "0 unreadable bytes" not in text and "(1 place(s) to repair)" in text


def test_a_repair_says_what_it_did_and_counts_every_place(tmp_path: Path) -> None:
    segment = _segmented_journal(tmp_path)[1]
    data = bytearray(segment.read_bytes())
    data[5] ^= 0x40  # its header
    data[300] ^= 0x40  # and a record in it
    segment.write_bytes(bytes(data))
    dry = mqstore("journal", "repair", str(tmp_path), "--dry-run")
    assert "would rewrite the header" in dry.stdout and "would pad" in dry.stdout
    assert "(2 place(s) to repair)" in dry.stdout
    done = mqstore("journal", "repair", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "would " not in done.stdout, done.stdout
    assert f"rewrote the header of {segment.name}" in done.stdout
    assert f"padded {segment.name} bytes" in done.stdout
    assert "(2 place(s) repaired)" in done.stdout
    assert done.stdout.splitlines()[-1] == "repaired"
    again = mqstore("journal", "repair", str(tmp_path))
    assert "intact" in again.stdout and "repaired" not in again.stdout
