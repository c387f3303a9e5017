"""``mqstore serve`` killed with SIGKILL, a byte of the last record it acknowledged flipped
since: the next start refuses with one line naming ``mqstore journal repair`` and keeps the
journal as it is, instead of taking the record for a torn write and cutting it away."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from journal import inspect
from tests.broker.harness import drain
from tests.crash.test_journal_directory_serve import QUEUE, _refused, _send
from tests.interop.conftest import MqstoreServer


def test_a_flipped_byte_in_the_last_acknowledged_record_stops_serve_until_repaired(
    dsn: str, tmp_path: Path
) -> None:
    base = tmp_path / "data"
    server = MqstoreServer(dsn, base, name="a", journal=True, lock="none")
    server.env["MQSTORE_CHECKPOINT_INTERVAL_MS"] = "600000"  # both only in the journal
    server.start()
    _send(server.port, 2)  # both receipted: acknowledged
    server.kill()
    journal = base / "journal"
    report = inspect(journal)
    assert report.problem is None and report.end is not None
    last = report.segments[-1]
    assert last.last is not None
    start, end = last.last.offset, report.end.offset
    segment = journal / last.file
    data = bytearray(segment.read_bytes())
    assert len(data) > end and not data[end:].strip(b"\0")  # the writer's zero-filled space
    data[(start + end) // 2] ^= 0x40
    segment.write_bytes(bytes(data))

    text = _refused(MqstoreServer(dsn, base, name="a", journal=True, lock="none"))
    assert f"{segment} is corrupt at offset {start}" in text, text
    assert f"mqstore journal repair {journal}" in text, text
    assert segment.read_bytes() == bytes(data)

    cli = [sys.executable, "-m", "mqstore", "journal", "repair", str(journal)]
    dry = subprocess.run([*cli, "--dry-run"], capture_output=True, text=True, check=True)
    assert f"would pad {segment.name} bytes {start}..{end}" in dry.stdout, dry.stdout
    assert f"the {end - start} unreadable bytes" in dry.stdout, dry.stdout
    subprocess.run(cli, capture_output=True, text=True, check=True)
    server = MqstoreServer(dsn, base, name="a", journal=True, lock="none").start()
    try:
        assert drain(server.port, QUEUE) == ["m0"]
    finally:
        server.stop()
