"""SparkSession for the mqstore jobs: the PostgreSQL JDBC jar from disk, nothing from the network.

Run locally (``python -m spark_etl ...`` or ``mqstore export``), the session is ``local[*]``
tuned to start fast. Run under ``spark-submit``, master, jars and resources are left to
``spark-submit`` (the driver's ``--jars`` must name the PostgreSQL JDBC driver).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from pyspark.sql import SparkSession

#: Where Debian's ``libpostgresql-jdbc-java`` puts the driver.
DEBIAN_JAR = "/usr/share/java/postgresql.jar"
JAR_ENV = "MQSTORE_JDBC_JAR"


class JdbcJarMissingError(RuntimeError):
    """The PostgreSQL JDBC driver jar cannot be found."""


def find_jdbc_jar(explicit: str | None = None) -> str:
    """The JDBC jar: ``explicit``, else ``$MQSTORE_JDBC_JAR``, else Debian's path."""
    for origin, candidate in (
        ("the jdbc_jar setting", explicit),
        (f"${JAR_ENV}", os.environ.get(JAR_ENV)),
    ):
        if not candidate:
            continue
        if Path(candidate).is_file():
            return str(Path(candidate).resolve())
        what = "is not a file" if Path(candidate).exists() else "does not exist"
        raise JdbcJarMissingError(
            f"the PostgreSQL JDBC jar {candidate!r} from {origin} {what}: point {origin} at "
            f"a postgresql.jar, or unset it to use {DEBIAN_JAR} from Debian's "
            "libpostgresql-jdbc-java"
        )
    if Path(DEBIAN_JAR).is_file():
        return str(Path(DEBIAN_JAR).resolve())
    raise JdbcJarMissingError(
        f"the PostgreSQL JDBC driver is not installed ({DEBIAN_JAR} does not exist): install "
        "it with `apt-get install libpostgresql-jdbc-java` (Debian, Ubuntu), or set "
        f"{JAR_ENV} to the path of a postgresql.jar"
    )


#: The class Spark's JDBC source loads for the jobs' reads (their ``driver`` option).
DRIVER_CLASS = "org.postgresql.Driver"


def jdbc_driver_loadable(spark: SparkSession) -> bool:
    """True when the driver's JVM can load :data:`DRIVER_CLASS` as Spark's JDBC source does:
    through the thread's context class loader (where ``--jars`` and ``--packages`` put it),
    else Spark's own. One reflective call through py4j, nothing is read."""
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

    jvm = spark.sparkContext._jvm
    assert jvm is not None
    lang = jvm.java.lang
    loader = lang.Thread.currentThread().getContextClassLoader()
    if loader is None:
        loader = lang.Class.forName("org.apache.spark.SparkContext").getClassLoader()
    try:
        lang.Class.forName(DRIVER_CLASS, False, loader)
    except Py4JJavaError as exc:
        if exc.java_exception.getClass().getName() == "java.lang.ClassNotFoundException":
            return False
        raise
    return True


def _driver_missing_under_spark_submit() -> JdbcJarMissingError:
    return JdbcJarMissingError(
        f"the PostgreSQL JDBC driver ({DRIVER_CLASS}) is not on the classpath of this "
        f"spark-submit: pass its jar with spark-submit --jars {DEBIAN_JAR} (a path every node "
        "has), or --packages org.postgresql:postgresql:VERSION (e.g. 42.7.4) where Maven "
        "Central is reachable"
    )


#: Settings every session of the jobs gets, under ``spark-submit`` too. Arrow batches (the
#: rows handed to the Python decoder, which hands back about twice as much) are cut at
#: 16 MiB, not only at 10 000 rows: 200 rows of 4 MiB messages were 800 MiB of direct
#: memory in one batch.
JOB_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.maxBytesPerBatch": str(16 * 1024 * 1024),
}


def under_spark_submit() -> bool:
    """True when this Python driver was started by ``spark-submit`` (a JVM gateway exists)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def local_threads(master: str) -> int | None:
    """The threads of a ``local``, ``local[N]`` or ``local[N,F]`` master (None for
    ``local[*]`` and the others): the default parallelism, so the reads open no more
    partitions, and database connections, than the run has cores."""
    if master == "local":
        return 1
    match = re.fullmatch(r"local\[\s*([1-9]\d*)\s*(,\s*\d+\s*)?\]", master)
    return int(match.group(1)) if match else None


def local_conf(master: str, jar: str, *, fast_start: bool, driver_memory: str) -> dict[str, str]:
    """Settings for a local session (see docs/spark.md for what each one buys)."""
    cores = os.cpu_count() or 2
    java_opts = "-XX:+UseParallelGC"
    if fast_start:
        java_opts = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    parallelism = str(local_threads(master) or cores)
    return {
        "spark.master": master,
        "spark.jars": jar,
        "spark.driver.memory": driver_memory,
        "spark.driver.extraJavaOptions": java_opts,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": parallelism,
        "spark.default.parallelism": parallelism,
        "spark.sql.adaptive.enabled": "false" if fast_start else "true",
        **JOB_CONF,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.sources.partitionOverwriteMode": "static",
        # Partitioned writes (destination/date) keep one open file per partition instead
        # of sorting every row by partition first (which spills wide rows to disk).
        "spark.sql.maxConcurrentOutputFileWriters": "64",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
    }


def build_session(
    master: str | None = None,
    *,
    app_name: str = "mqstore-etl",
    jdbc_jar: str | None = None,
    fast_start: bool = False,
    driver_memory: str = "2g",
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """Get or create the SparkSession.

    ``master`` defaults to ``local[*]`` when run directly; under ``spark-submit`` it must
    stay None (``--master``/``--jars`` decide). :class:`JdbcJarMissingError` is raised
    when the driver's JVM cannot load the PostgreSQL JDBC driver (left out of a submit, or
    ``$MQSTORE_JDBC_JAR`` names another jar). ``fast_start`` trades peak JIT
    speed for a 2-3 s quicker JVM start (tests). ``conf`` adds or overrides settings.
    """
    builder = SparkSession.builder.appName(app_name)
    submitted = under_spark_submit() and master is None
    if submitted:
        settings: dict[str, str] = dict(JOB_CONF)
    else:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        settings = local_conf(
            master or "local[*]",
            find_jdbc_jar(jdbc_jar),
            fast_start=fast_start,
            driver_memory=driver_memory,
        )
        if not (master or "local").startswith("local"):
            for key in ("spark.driver.bindAddress", "spark.driver.host"):
                settings.pop(key)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not jdbc_driver_loadable(spark):
        spark.stop()
        if submitted:
            raise _driver_missing_under_spark_submit()
        raise JdbcJarMissingError(
            f"the jar {settings.get('spark.jars')} holds no PostgreSQL JDBC driver "
            f"({DRIVER_CLASS}): point {JAR_ENV} at a postgresql.jar, or unset it to use "
            f"{DEBIAN_JAR} from Debian's libpostgresql-jdbc-java"
        )
    return spark


__all__ = [
    "DEBIAN_JAR",
    "DRIVER_CLASS",
    "JdbcJarMissingError",
    "build_session",
    "find_jdbc_jar",
    "jdbc_driver_loadable",
    "local_conf",
    "local_threads",
]
