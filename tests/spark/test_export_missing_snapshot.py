"""An export whose last run's snapshot (``OUT/_snapshots/<run>``) was deleted by hand: it
says what that costs, loses no message, and the next run has a snapshot again."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from spark_etl.export import ArchiveError, current_messages, export, load_watermarks, read_dataset
from tests.spark.conftest import dsn_of, execute, spark_job
from tests.spark.test_export import Q, _add


@pytest.mark.slow
def test_a_deleted_snapshot_is_named_in_a_warning_and_late_rows_are_still_exported(
    spark: Any, activemq_engine: Engine, tmp_path: Path
) -> None:
    dsn, out = dsn_of(activemq_engine), tmp_path / "archive"
    execute(activemq_engine, "DELETE FROM activemq_msgs WHERE id = 3")
    first = export(spark, dsn, out)
    assert first.message_rows == 16 and load_watermarks(out)["msgs_max_id"] == 17
    snap_dir = out / "_snapshots" / load_watermarks(out)["snapshot"]
    shutil.rmtree(snap_dir)

    # Below the watermark: a message under the reused ID 3 (or a late commit); and a removal.
    _add(activemq_engine, 3, 50)
    execute(activemq_engine, "DELETE FROM activemq_msgs WHERE id = 1")
    run = spark_job("export", "--dsn", dsn, "--out", str(out))
    assert run.returncode == 0, run.stderr
    warning = [line for line in run.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1, run.stderr
    assert str(snap_dir) in warning[0] and "get no history rows" in warning[0]
    assert "Traceback" not in run.stderr

    messages = read_dataset(spark, out / "messages")
    assert messages.where("id = 3").select("text").collect()[0]["text"] == "new 50"
    assert messages.count() == 17
    assert not (out / "history").exists() or read_dataset(spark, out / "history").count() == 0
    marks = load_watermarks(out)
    assert (out / "_snapshots" / marks["snapshot"]).is_dir()

    # The next run diffs against that snapshot again, and warns about nothing.
    execute(activemq_engine, "DELETE FROM activemq_msgs WHERE id = 4")
    third = export(spark, dsn, out)
    assert third.warnings == [] and third.message_rows == 0
    assert third.history == {Q: 1}
    assert [r["id"] for r in read_dataset(spark, out / "history").collect()] == [4]


def test_current_messages_says_in_one_line_when_there_is_no_export_or_no_snapshot(
    spark: Any, activemq_engine: Engine, tmp_path: Path
) -> None:
    out = tmp_path / "archive"
    with pytest.raises(ArchiveError, match=r"holds no export .*give the --out directory"):
        current_messages(spark, out)

    export(spark, dsn_of(activemq_engine), out)
    snap_dir = out / "_snapshots" / load_watermarks(out)["snapshot"]
    shutil.rmtree(snap_dir)
    with pytest.raises(ArchiveError, match=r"snapshot .* is missing .*export into .* once more"):
        current_messages(spark, out)

    export(spark, dsn_of(activemq_engine), out)
    assert current_messages(spark, out).count() == 17
