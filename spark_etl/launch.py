"""Starting Spark for the CLI's jobs: PySpark, Java, ``--master`` and ``--driver-memory``
checked before anything is created, and the session, its JVM logging into the job's
``OUT/_logs`` file rather than the terminal."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from .job_failure import first_line

_INSTALL_HINT = "PySpark is not installed: pip install 'mqstore[spark]'"
#: Masters Spark knows (``spark-submit --master``); anything else fails inside the JVM.
_MASTER = re.compile(
    r"local(\[(\*|[1-9]\d*)(,\s*[1-9]\d*)?\])?|local-cluster\[\d+,\s*\d+,\s*\d+\]"
    r"|yarn|(spark|k8s|mesos)://\S+"
)
#: A JVM heap size as Spark takes it (``512m``, ``4g``; a bare number is MiB).
_MEMORY = re.compile(r"([1-9]\d*)([kmgt]?)", re.IGNORECASE)
_UNIT_MIB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
#: The least heap Spark starts with: 1.5 times its 300 MiB reserve, and some room.
MIN_DRIVER_MIB = 512


def driver_memory(value: str) -> str:
    """``value`` as a JVM heap size: a bare number means MiB, as ``spark.driver.memory``
    reads it (the JVM would read ``-Xmx2048`` as 2048 bytes). Raises ValueError, saying what
    to give, for anything else or a heap too small for Spark to start."""
    match = _MEMORY.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"invalid --driver-memory {value!r}: give a size such as 2g or 512m")
    number, unit = match.groups()
    if int(number) * _UNIT_MIB[unit.lower() or "m"] < MIN_DRIVER_MIB:
        raise ValueError(
            f"--driver-memory {value!r} is too small: Spark needs at least "
            f"{MIN_DRIVER_MIB}m (give a size such as 2g or 512m)"
        )
    return f"{number}{unit.lower() or 'm'}"


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(code)


def require_pyspark() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise fail(_INSTALL_HINT) from None


def java_missing() -> str | None:
    """Why no JVM can start here, as Spark's launcher looks for one (``$JAVA_HOME/bin/java``,
    else ``java`` on the PATH); None when one can, or under ``spark-submit`` (its JVM runs)."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return None
    install = "install a Java 17 runtime (e.g. apt-get install openjdk-17-jre-headless)"
    home = os.environ.get("JAVA_HOME")
    if home:
        if os.access(Path(home) / "bin" / "java", os.X_OK):
            return None
        return f"JAVA_HOME={home} holds no bin/java: {install} or set JAVA_HOME to one"
    if shutil.which("java"):
        return None
    return (
        f"no Java runtime (JAVA_HOME is not set, no java on the PATH): {install} or set JAVA_HOME"
    )


def check_options(master: str | None, memory: str) -> str:
    """Check what starting Spark needs before anything is read or created: PySpark, Java,
    ``--master`` and ``--driver-memory`` (returned normalised); else one line, exit code 1."""
    require_pyspark()
    if master is not None and not _MASTER.fullmatch(master):
        raise fail(
            f"error: unknown --master {master!r}: give local, local[N], local[*], "
            "spark://HOST:PORT, yarn or k8s://URL (or leave it unset under spark-submit)"
        )
    try:
        memory = driver_memory(memory)
    except ValueError as exc:
        raise fail(f"error: {exc}") from None
    if missing := java_missing():
        raise fail(f"error: {missing}")
    return memory


def start_session(master: str | None, memory: str = "2g", log: Path | None = None) -> Any:
    """The SparkSession, or a one-line error when PySpark, Java, the JDBC jar, the master or
    the driver memory is wrong. A local JVM logs into ``log`` (:func:`jvm_stderr`)."""
    memory = check_options(master, memory)
    from .session import JdbcJarMissingError, build_session

    try:
        with jvm_stderr(log):
            return build_session(master, driver_memory=memory)
    except JdbcJarMissingError as exc:
        raise fail(f"error: {exc}") from None
    except Exception as exc:  # the JVM did not start: master unreachable...
        where = f"; Spark's log: {log}" if log else ""
        raise fail(
            f"error: cannot start Spark (--master {master or 'local[*]'}): {first_line(exc)}"
            + where
        ) from None


def log_file(out: Path, job: str) -> Path | None:
    """``OUT/_logs/JOB.log`` (emptied), where the job's JVM logs; None if it cannot be made."""
    log = out / "_logs" / f"{job}.log"
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_bytes(b"")
    except OSError:
        return None
    return log


@contextmanager
def jvm_stderr(log: Path | None) -> Iterator[None]:
    """Meanwhile, make ``log`` this process's file descriptor 2: a JVM started now keeps it as
    its stderr, and so do the Python workers it starts, so Spark's log, executors' stack
    traces and workers' tracebacks go there; the CLI's own stderr is the one line it says."""
    if log is None:
        yield
        return
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    except OSError:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fd, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)
