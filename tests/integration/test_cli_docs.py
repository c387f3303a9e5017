"""What README.md tells a user about the command line holds of the code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mqstore.settings import Settings
from tests.conftest import REPO


def _readme_variables() -> set[str]:
    """The variables the README's configuration table names (``MQSTORE_A`` / ``_B`` rows
    name ``MQSTORE_B`` too)."""
    names = set()
    for line in (REPO / "README.md").read_text().splitlines():
        if line.startswith("| `MQSTORE_"):
            for name in re.findall(r"`([A-Z_]+)`", line.split("|")[1]):
                names.add(name if name.startswith("MQSTORE_") else f"MQSTORE{name}")
    return names


def test_the_readme_configuration_table_names_every_setting_and_no_other() -> None:
    settings = {f"MQSTORE_{name.upper()}" for name in Settings.model_fields}
    table = _readme_variables()
    assert sorted(settings - table) == [], "settings the README does not list"
    assert sorted(table - settings) == [], "README rows that are no setting"


@pytest.mark.parametrize("output", [[], ["--json"]], ids=["table", "json"])
def test_output_cut_off_by_a_closed_pipe_ends_quietly(dsn: str, output: list[str]) -> None:
    """``mqstore stats | head``: when the reader goes away the command stops quietly with
    128 + SIGPIPE, as other tools do: no error line, and not code 1, which ``db check``
    gives a schema that differs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqstore", "stats", "--dsn", dsn, *output],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # before the command has written anything
    _, stderr = proc.communicate(timeout=120)
    assert (proc.returncode, stderr) == (141, "")


@pytest.mark.parametrize("entry", ["mqstore.entry", "spark_etl.cli"])
@pytest.mark.parametrize(
    ("command", "given_dsn"),
    [("export", True), ("audit", True), ("export", False), ("audit", False)],
    ids=["export", "audit", "export-embedded", "audit-embedded"],
)
def test_the_spark_jobs_without_the_spark_extra_say_how_to_install_it(
    dsn: str, tmp_path: Path, command: str, given_dsn: bool, entry: str
) -> None:
    """docs/spark.md: without PySpark, ``mqstore export``/``audit`` (and ``python -m
    spark_etl``) print one line telling the user to ``pip install 'mqstore[spark]'``
    (exit 1), never a traceback."""
    without_spark = (
        "import sys\n"
        "for name in ('pyspark', 'py4j', 'pyarrow', 'pandas'):\n"
        "    sys.modules[name] = None\n"
        f"from {entry} import main\n"
        "main()\n"
    )
    args = [command, "--out", str(tmp_path / "out"), *(["--dsn", dsn] if given_dsn else [])]
    env = {k: v for k, v in os.environ.items() if k != "MQSTORE_DSN"}
    result = subprocess.run(
        [sys.executable, "-c", without_spark, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "pip install 'mqstore[spark]'" in line, line
