"""``mqstore stats`` counts a subscription's backlog by the store's prioritizedMessages mode.

One subscription with two ACKS rows, as ActiveMQ with prioritizedMessages writes them:
PRIORITY 0 has acknowledged nothing, PRIORITY 5 has acknowledged message 2 (its priority 5).
Prioritized, each row counts the messages of its PRIORITY after its own LAST_ACKED_ID (1 and
3 are pending); plain, as ActiveMQ's statements without priority, every message after the
least LAST_ACKED_ID (1, 2 and 3).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.integration.test_cli import mqstore

T = "topic://prices"


def _two_priority_rows(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, "
                "priority, msg) VALUES (:id, :c, 'ID:amq-1:1:1', :id, 0, :p, '\\x00'::bytea)"
            ),
            [{"id": 1, "c": T, "p": 0}, {"id": 2, "c": T, "p": 5}, {"id": 3, "c": T, "p": 0}],
        )
        conn.execute(
            sa.text(
                "INSERT INTO activemq_acks (container, sub_dest, client_id, sub_name, "
                "last_acked_id, priority) VALUES (:c, :c, 'client-1', 'sub', :last, :p)"
            ),
            [{"c": T, "last": 0, "p": 0}, {"c": T, "last": 2, "p": 5}],
        )


def _backlogs(dsn: str, tmp_path: Path, prioritized: str, *flags: str) -> list[tuple[str, int]]:
    """Each subscription's name and backlog as ``stats --json`` shows them, with
    MQSTORE_PRIORITIZED_MESSAGES set to ``prioritized``."""
    shown = mqstore(
        "stats",
        "--json",
        *flags,
        "--dsn",
        dsn,
        "--data-dir",
        str(tmp_path / "none"),
        env={**os.environ, "MQSTORE_PRIORITIZED_MESSAGES": prioritized},
    )
    assert shown.returncode == 0, shown.stderr
    return [(s["name"], s["backlog"]) for s in json.loads(shown.stdout)["subscriptions"]]


@pytest.mark.parametrize(("prioritized", "backlog"), [("false", 3), ("true", 2)])
def test_stats_backlog_follows_the_prioritized_messages_setting(
    engine: Engine, dsn: str, tmp_path: Path, prioritized: str, backlog: int
) -> None:
    _two_priority_rows(engine)
    assert _backlogs(dsn, tmp_path, prioritized) == [("sub", backlog)]


@pytest.mark.parametrize(
    ("flag", "prioritized", "backlog"),
    [("--prioritized-messages", "false", 2), ("--no-prioritized-messages", "true", 3)],
)
def test_the_prioritized_messages_flag_wins_over_the_setting(
    engine: Engine, dsn: str, tmp_path: Path, flag: str, prioritized: str, backlog: int
) -> None:
    _two_priority_rows(engine)
    assert _backlogs(dsn, tmp_path, prioritized, flag) == [("sub", backlog)]
