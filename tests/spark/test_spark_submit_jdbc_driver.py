"""Under a real ``spark-submit`` (PySpark's own, local master), the PostgreSQL JDBC driver
comes from ``--jars``/``--packages``: a submit without it is one line saying what to pass.
A session with it passes the same check (every Spark test's session makes it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from spark_etl.session import jdbc_driver_loadable
from tests.spark.conftest import JOB_TIMEOUT, dsn_of
from tests.spark.test_export import _add

SUBMIT = Path(__file__).resolve().parents[2] / "spark_etl" / "submit.py"


def _spark_submit(*options: str, dsn: str, out: Path) -> subprocess.CompletedProcess[str]:
    """``spark-submit OPTIONS spark_etl/submit.py export`` into ``out`` (its Python's stderr
    is merged into stdout by spark-submit)."""
    python = sys.executable
    env = {
        **os.environ,
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    command = [str(Path(python).parent / "spark-submit"), "--master", "local[1]"]
    command += ["--conf", "spark.ui.enabled=false", *options, str(SUBMIT)]
    command += ["export", "--dsn", dsn, "--out", str(out)]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=JOB_TIMEOUT, check=False
    )


@pytest.mark.slow
def test_spark_submit_without_the_jdbc_jar_says_to_pass_it(engine: Engine, tmp_path: Path) -> None:
    _add(engine, 1, 1)
    bare = _spark_submit(dsn=dsn_of(engine), out=tmp_path / "bare")
    said = bare.stdout + bare.stderr
    errors = [line for line in said.splitlines() if line.startswith("error:")]
    assert bare.returncode == 1, said
    assert len(errors) == 1 and "Traceback" not in said, said
    assert "org.postgresql.Driver" in errors[0]
    assert "spark-submit --jars" in errors[0]
    assert "--packages org.postgresql:postgresql:" in errors[0]
    assert not (tmp_path / "bare" / "messages").exists()


def test_a_session_with_the_jar_passes_the_driver_check(spark: Any) -> None:
    """The check every session makes: the jar given as ``spark.jars`` (as ``--jars`` gives
    it under spark-submit) is found, so no job with the driver is refused."""
    assert jdbc_driver_loadable(spark)
