"""The shared dead-letter queue is stored as ``queue://NAME`` in ActiveMQ's CONTAINER
column (250 characters): a longer one could never hold a message, so every dead-lettering
would fail and be tried again. It is refused with the settings, naming the longest that fits."""

from __future__ import annotations

import os

import pytest

from mqstore.errors import ConfigError
from mqstore.settings import load_settings
from tests.integration.test_cli import mqstore
from tests.integration.test_embedded import _error_lines

LONGEST = 250 - len("queue://")


def test_a_dead_letter_queue_name_too_long_for_a_container_is_refused_before_serving(
    dsn: str,
) -> None:
    env = {**os.environ, "MQSTORE_DLQ_NAME": "D" * (LONGEST + 1)}
    result = mqstore("serve", "--dsn", dsn, "--no-journal", "--stomp", "127.0.0.1:0", env=env)
    assert result.returncode == 2, result.stderr
    [line] = _error_lines(result.stderr)
    assert line.startswith("error: invalid configuration: MQSTORE_DLQ_NAME: the dead-letter")
    assert "CONTAINER column holds at most 250" in line, line
    assert f"give a name of at most {LONGEST} characters" in line, line


def test_the_longest_dead_letter_queue_name_that_fits_a_container_is_taken() -> None:
    assert load_settings(dlq_name="D" * LONGEST).dlq_name == "D" * LONGEST
    with pytest.raises(ConfigError, match="at most 242 characters"):
        load_settings(dlq_name="D" * (LONGEST + 1))
