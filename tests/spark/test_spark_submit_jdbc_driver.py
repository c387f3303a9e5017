"""Under a real ``spark-submit`` (PySpark's own, local master), the PostgreSQL JDBC driver
comes from ``--jars``/``--packages``: a submit without it is one line saying what to pass,
one with it runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from spark_etl.export import read_dataset
from spark_etl.session import find_jdbc_jar
from tests.spark.conftest import JOB_TIMEOUT, dsn_of
from tests.spark.test_export import Q, _add

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
def test_spark_submit_without_the_jdbc_jar_says_to_pass_it_and_with_it_exports(
    spark: Any, engine: Engine, tmp_path: Path
) -> None:
    _add(engine, 1, 1)
    dsn = dsn_of(engine)

    bare = _spark_submit(dsn=dsn, out=tmp_path / "bare")
    said = bare.stdout + bare.stderr
    errors = [line for line in said.splitlines() if line.startswith("error:")]
    assert bare.returncode == 1, said
    assert len(errors) == 1 and "Traceback" not in said, said
    assert "org.postgresql.Driver" in errors[0]
    assert "spark-submit --jars" in errors[0]
    assert "--packages org.postgresql:postgresql:" in errors[0]

    jar = find_jdbc_jar()
    run = _spark_submit("--jars", jar, dsn=dsn, out=tmp_path / "archive")
    assert run.returncode == 0, run.stdout + run.stderr
    messages = read_dataset(spark, tmp_path / "archive" / "messages")
    assert [(r["id"], r["container"]) for r in messages.collect()] == [(1, Q)]
