"""An export killed with SIGKILL mid-run, then run again: every row archived once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sqlalchemy.engine import Engine

from tests.spark.conftest import dsn_of, spark_job


def _ids(out: Path) -> list[int]:
    return sorted(
        i
        for f in out.glob("messages/**/*.parquet")
        for i in pq.read_table(f, columns=["id"])["id"].to_pylist()
    )


@pytest.mark.slow
def test_an_export_killed_after_staging_its_rows_is_redone_once(
    activemq_engine: Engine, tmp_path: Path
) -> None:
    out = tmp_path / "archive"
    args = ["export", "--dsn", dsn_of(activemq_engine), "--out", str(out), "--master", "local[1]"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqstore", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300  # a bound on waiting, not an assertion on speed
        while not list(out.glob("_staging/*/messages/_SUCCESS")):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the export ended (code {proc.returncode}) before it staged rows")
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)  # the Python driver; its JVM follows it
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "_watermarks.json").exists()

    again = spark_job(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _ids(out) == list(range(1, 18))
    assert [p.name for p in (out / "_staging").iterdir()] == []

    third = spark_job(*args)
    assert third.returncode == 0, third.stderr[-3000:]
    assert _ids(out) == list(range(1, 18))
