"""``mqstore serve --prioritized-messages`` / ``--no-prioritized-messages``: the flag sets
MQSTORE_PRIORITIZED_MESSAGES for the broker, and wins over the environment (``stats``'s flag:
test_cli_stats_priority_mode.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.broker.harness import connect
from tests.integration.test_serve import serve_until_listening


@pytest.mark.parametrize(
    ("flag", "env", "stored_priority"),
    [
        ("--prioritized-messages", {}, 9),
        ("--no-prioritized-messages", {"MQSTORE_PRIORITIZED_MESSAGES": "true"}, 0),
    ],
)
def test_serve_stores_the_jms_priority_only_with_prioritized_messages(
    dsn: str, engine: Engine, tmp_path: Path, flag: str, env: dict[str, str], stored_priority: int
) -> None:
    """As ActiveMQ: the PRIORITY column holds the JMS priority with prioritizedMessages, else 0."""
    proc, line = serve_until_listening(dsn, tmp_path, "--stomp", "127.0.0.1:0", flag, env=env)
    try:
        assert line.startswith("mqstore serving STOMP on 127.0.0.1:"), (
            line,
            proc.poll(),
            proc.stderr.read() if proc.stderr and proc.poll() is not None else "",
        )
        conn, collector = connect(int(line.rsplit(":", 1)[1]))
        conn.send(
            "/queue/prio", "urgent", headers={"persistent": "true", "priority": "9", "receipt": "r"}
        )
        assert collector.wait(lambda: "r" in collector.receipts), collector.errors
        conn.disconnect()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    with engine.connect() as c:
        rows = c.execute(sa.text("SELECT container, priority FROM activemq_msgs")).all()
    assert [tuple(row) for row in rows] == [("queue://prio", stored_priority)]
