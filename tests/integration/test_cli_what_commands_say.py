"""What commands tell an operator: a journal's inspection in words and where its checkpoint
position lives, the revision adopt ended at, the destinations browse refuses as the broker
does, and a schema behind head under the figures of stats."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from mqstore import migrate
from mqstore.broker.frames import FrameError
from mqstore.broker.messages import container_of
from tests.conftest import load_activemq_fixture
from tests.integration.test_cli import checkpointed_journal, mqstore


def test_journal_inspect_speaks_words_and_points_to_stats_for_the_checkpoint(
    dsn: str, engine: Engine, tmp_path: Path
) -> None:
    """Checkpoints store their position in the database, not in the journal directory:
    inspect says so (and where to look) instead of a checkpoint that is always empty."""
    journal_dir = tmp_path / "journal"
    checkpointed_journal(engine, journal_dir)
    stats = mqstore("stats", "--dsn", dsn, "--journal-dir", str(journal_dir))
    assert "applied to the database up to" in " ".join(stats.stdout.split()), stats.stdout

    shown = mqstore("journal", "inspect", str(journal_dir))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"journal {journal_dir}: ")
    assert "damage: none" in lines
    assert lines[-1] == (
        "checkpoint position: kept in the database (MQSTORE_JOURNAL), not in this directory; "
        "`mqstore stats` shows how far the database applied this journal"
    )
    as_json = mqstore("journal", "inspect", str(journal_dir), "--json")
    report = json.loads(as_json.stdout)
    assert report["records"] >= 1
    assert "last_checkpoint" not in report and "last_checkpoint_record" not in report
    figures = json.loads(mqstore("stats", "--json", "--dsn", dsn, "--journal-dir",
                                 str(journal_dir)).stdout)  # fmt: skip
    assert figures["journal"]["checkpointed_to"] is not None
    assert "last_checkpoint" not in figures["journal"]


def test_adopt_says_the_revision_it_ended_at(empty_dsn: str, empty_engine: Engine) -> None:
    load_activemq_fixture(empty_engine)
    adopted = mqstore("db", "adopt", "--dsn", empty_dsn)
    assert adopted.returncode == 0, adopted.stderr
    head = migrate.head_revision()
    assert f"- stamped revision 0001 (ActiveMQ's tables), upgraded to {head}" in (
        adopted.stdout.splitlines()
    ), adopted.stdout
    status = mqstore("db", "status", "--dsn", empty_dsn)
    assert status.stdout.splitlines()[-1] == f"schema revision: {head} (head {head})"


@pytest.mark.parametrize(
    "destination", ["/temp-queue/x", "/temp-topic/x", "/queues/x", "/queue/", "a.*", "a,b"]
)
def test_browse_refuses_a_destination_as_the_broker_does(dsn: str, destination: str) -> None:
    with pytest.raises(FrameError) as refused:
        container_of(destination)
    result = mqstore("browse", destination, "--dsn", dsn)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.strip() == f"error: {refused.value}", result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("output", [[], ["--json"]], ids=["table", "json"])
def test_stats_on_a_schema_behind_head_shows_the_figures_and_says_to_upgrade(
    empty_dsn: str, output: list[str]
) -> None:
    assert mqstore("db", "upgrade", "--revision", "0001", "--dsn", empty_dsn).returncode == 0
    env = {**os.environ, "COLUMNS": "200"}
    result = mqstore("stats", "--dsn", empty_dsn, *output, env=env)
    assert result.returncode == 0, result.stderr
    assert "lock" in result.stdout
    assert result.stderr.strip() == (
        f"warning: database schema is at revision 0001, this mqstore needs "
        f"{migrate.head_revision()}: run `mqstore db upgrade`"
    )
