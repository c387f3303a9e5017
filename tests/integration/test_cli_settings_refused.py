"""Settings an operator gets wrong, as a new user sets them in the environment: the refusal
names the variable set, and comes before ``mqstore serve`` makes an embedded store."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.integration.test_cli import mqstore
from tests.integration.test_embedded import Workdir, _env, _error_lines, work

__all__ = ["work"]  # the fixture, imported for these tests

#: One byte more than PostgreSQL can hand back as one BYTEA value (511 MiB).
TOO_LARGE = str(511 * 1024 * 1024 + 1)


def test_a_message_size_postgresql_cannot_hand_back_is_refused_before_a_store_is_made(
    work: Workdir,
) -> None:
    """README: MQSTORE_MAX_MESSAGE_BYTES is at most 511 MiB. Above it, the embedded default
    says so naming the variable, and leaves no data directory behind."""
    result = subprocess.run(
        [sys.executable, "-m", "mqstore", "serve", "--stomp", "127.0.0.1:0"],
        cwd=work.path, env={**_env(), "MQSTORE_MAX_MESSAGE_BYTES": TOO_LARGE},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    [line] = _error_lines(result.stderr)
    assert "MQSTORE_MAX_MESSAGE_BYTES" in line and "511 MiB" in line, line
    assert not (work.path / "mqstore-data").exists()


def test_a_renewal_not_shorter_than_the_lease_names_the_variables(dsn: str) -> None:
    env = {**os.environ, "MQSTORE_RENEW_MS": "20000"}
    result = mqstore("serve", "--dsn", dsn, "--no-journal", "--stomp", "127.0.0.1:0", env=env)
    assert result.returncode == 2, result.stderr
    [line] = _error_lines(result.stderr)
    assert "MQSTORE_RENEW_MS (20000) must be shorter than MQSTORE_LEASE_MS (10000)" in line
    assert "settings:" not in line, line


@pytest.mark.parametrize("given", ["/queue/MyDLQ", "queue://MyDLQ"])
def test_a_dead_letter_queue_given_as_a_destination_is_refused_naming_its_name(
    dsn: str, given: str
) -> None:
    """MQSTORE_DLQ_NAME is the queue's name, as ActiveMQ's deadLetterQueue takes it; given
    as a destination it would dead-letter into a queue no client subscribes to."""
    env = {**os.environ, "MQSTORE_DLQ_NAME": given}
    result = mqstore("serve", "--dsn", dsn, "--no-journal", "--stomp", "127.0.0.1:0", env=env)
    assert result.returncode == 2, result.stderr
    [line] = _error_lines(result.stderr)
    assert line.startswith("error: invalid configuration: MQSTORE_DLQ_NAME: the dead-letter")
    assert "give e.g. MyDLQ" in line and "Value error" not in line
