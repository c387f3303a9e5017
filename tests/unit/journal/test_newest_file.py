"""A ``newest`` file holding a number no segment file name can hold is junk, not a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import Journal, inspect, repair
from tests.unit.journal.test_recovery import ids_of, write_log

JUNK = {"u64-max": "18446744073709551615", "5000-digits": "9" * 5000}


@pytest.mark.parametrize("text", JUNK.values(), ids=JUNK.keys())
def test_a_newest_file_with_an_impossible_number_is_ignored(tmp_path: Path, text: str) -> None:
    write_log(tmp_path, 3)
    (tmp_path / "newest").write_text(text)
    assert inspect(tmp_path).problem is None
    assert repair(tmp_path, dry_run=True).problem is None
    with Journal.open(tmp_path) as journal:
        assert ids_of(journal) == [0, 1, 2]
    assert (tmp_path / "newest").read_text().strip() == "1"  # recorded again
