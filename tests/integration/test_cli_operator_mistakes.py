"""An operator's mistakes the CLI must answer with one line and exit code 2, harming nothing:
settings beyond any clock."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.integration.test_cli import mqstore


def _one_line_error(result: subprocess.CompletedProcess[str], words: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("days", ["inf", "1e308"])
def test_history_trim_older_than_days_beyond_any_clock(dsn: str, days: str) -> None:
    result = mqstore("history", "trim", "--older-than-days", days, "--dsn", dsn)
    _one_line_error(result, "history_retention_days")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MQSTORE_HISTORY_RETENTION_DAYS", "inf"),
        ("MQSTORE_HISTORY_RETENTION_DAYS", "1e308"),
        ("MQSTORE_CLEANUP_INTERVAL_S", "inf"),  # the broker's cleanup thread died of it
        ("MQSTORE_CLEANUP_INTERVAL_S", "1e300"),
        ("MQSTORE_DESTINATION_GC_S", "infinity"),
    ],
)
def test_a_period_setting_beyond_any_clock_is_refused(dsn: str, variable: str, value: str) -> None:
    env = {**os.environ, variable: value}
    result = mqstore("history", "trim", "--dry-run", "--dsn", dsn, env=env)
    _one_line_error(result, variable)
