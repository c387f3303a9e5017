"""A session-scoped local SparkSession (fast-start settings) and helpers for the Spark tests.

The database fixtures (``dsn``, ``activemq_engine``...) come from ``tests/conftest.py``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.integration.test_cli import mqstore

try:
    import pyspark  # noqa: F401
except ImportError as exc:  # fail, never skip: the Spark jobs are part of what is tested
    raise ImportError("pyspark is missing: pip install -e '.[dev,spark]'") from exc


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)
            # pyspark 4.3 warns about pandas 3 when Arrow is used; the jobs do not need pandas.
            item.add_marker(
                pytest.mark.filterwarnings(
                    "ignore:PySpark does not yet fully support pandas:FutureWarning"
                )
            )


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[1] session for the whole run (JVM start costs ~5-9 s)."""
    from spark_etl.session import JdbcJarMissingError, build_session

    try:
        session = build_session(
            "local[1]", app_name="mqstore-tests", fast_start=True, driver_memory="1g"
        )
    except JdbcJarMissingError as exc:
        pytest.fail(str(exc))
    yield session
    session.stop()


# A job run through the CLI starts its own JVM; on a busy two-core machine one that reads
# hundreds of MiB takes minutes. The timeout only stops a job that hangs.
JOB_TIMEOUT = 600


def spark_job(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``mqstore JOB ARGS...`` for a job that runs Spark, with :data:`JOB_TIMEOUT`."""
    return mqstore(*args, env=env, timeout=JOB_TIMEOUT)


def dsn_of(engine: Engine) -> str:
    """The DSN (with password) of ``engine``'s database."""
    return engine.url.render_as_string(hide_password=False)


def execute(engine: Engine, sql: str, params: Any = None) -> None:
    """Run one statement in its own transaction."""
    with engine.begin() as conn:
        conn.execute(sa.text(sql), params or {})


def fetch(engine: Engine, sql: str) -> list[Any]:
    """All rows of a query."""
    with engine.connect() as conn:
        return list(conn.execute(sa.text(sql)).all())
