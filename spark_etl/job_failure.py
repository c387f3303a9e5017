"""One line for a Spark job that failed: out of memory, a JVM that ended, or the first
telling line of the error; py4j's own tracebacks of a JVM going away are kept unshown.

Spark's exceptions carry a JVM stack below their first line, and a JVM that runs out of
memory fails the job in one of several ways before it exits: :func:`spark_failure` reads
them all (the exception, its Java causes, the JVM's exit code) into the line the CLI prints.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: How Spark's JVM exits after an OutOfMemoryError (``SparkExitCode.OOM``).
JVM_OOM_EXIT = 52


def first_line(exc: BaseException, text: str | None = None) -> str:
    """The first telling line of an exception's message (or ``text``): Spark's carry a JVM
    stack below it, py4j's start with 'An error occurred while calling o12.parquet'."""
    text = _text(exc) if text is None else text
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    told = [line for line in lines if not line.startswith("An error occurred while calling")]
    line = (told or lines)[0] if lines else ""
    # PySpark words some errors ": org.apache.spark.SparkException: ..." (no class before).
    return (line.lstrip(": ") or type(exc).__name__)[:500]


#: Exceptions that say what went wrong outside Spark: I/O (a full disk, a lost file),
#: the database (pgjdbc's PSQLException, SQL errors) and the network.
_ROOT_CAUSE = re.compile(
    r"(?:^|Caused by: |: )((?:java\.io|java\.nio\.file|java\.net|java\.sql|org\.postgresql\.util)"
    r"\.[\w$]+(?:Exception|Error)(?:: [^\n]*)?)",
    re.MULTILINE,
)


def root_cause(text: str) -> str | None:
    """The innermost I/O, database or network exception in ``text`` (an exception's message
    and its Java causes, outermost first), e.g. ``java.io.IOException: No space left on
    device``; None when there is none."""
    found = _ROOT_CAUSE.findall(text)
    return found[-1].strip()[:500] if found else None


def _text(exc: BaseException) -> str | None:
    """``str(exc)``, or None when that fails (a Java exception's text is fetched from its JVM,
    which may be gone)."""
    try:
        return str(exc)
    except Exception:
        return None


def _jvm_exit(spark: Any, wait: bool) -> int | None:
    """The exit code of the local JVM behind ``spark`` once it has ended (``wait``: give it
    10 s to); None while it runs, or when it is not ours (``spark-submit`` started it)."""
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    if proc is None:
        return None
    try:
        code = proc.wait(timeout=10) if wait else proc.poll()
    except Exception:
        return None
    return None if code is None else int(code)


#: How the JVM words running out of memory, in an exception or its causes.
_OOM_SIGNS = ("java.lang.OutOfMemoryError", "Java heap space", "GC overhead limit exceeded")


def _causes(exc: BaseException) -> str:
    """The text of ``exc`` and of its causes, with the Java stack traces PySpark keeps
    (a captured exception's own text is its first line only)."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 20:
        seen.add(id(current))
        parts.append(_text(current) or "")
        stack = getattr(current, "_stackTrace", None)
        if isinstance(stack, str):
            parts.append(stack)
        cause = getattr(current, "_cause", None)
        current = cause if isinstance(cause, BaseException) else current.__cause__
    return "\n".join(parts)


def spark_failure(exc: BaseException, spark: Any, memory: str, log: Path | None = None) -> str:
    """One line for a job that failed inside Spark; an archive is then left as it was.
    ``log`` is where the JVM writes its log (else its stderr): the line names it.

    A failure with an I/O, database or network exception among its causes is told by the
    innermost such one (:func:`root_cause`), then by Spark's first line."""
    from py4j.protocol import (  # type: ignore[import-untyped]
        Py4JError,
        Py4JJavaError,
        Py4JNetworkError,
    )

    text = _text(exc)
    lost = (
        text is None
        or isinstance(exc, (Py4JNetworkError, ConnectionError))
        or "SparkContext was shut down" in text  # the JVM is exiting (out of memory...)
    )
    # A JVM running out of memory exits (code 52) while the job fails in one of several
    # ways: the connection lost, an INTERNAL_ERROR with the OutOfMemoryError among its Java
    # causes, or py4j failing to call into the exiting JVM. Wait for it in all of them.
    internal = text is not None and "INTERNAL_ERROR" in text
    py4j_failed = isinstance(exc, Py4JError) and not isinstance(exc, Py4JJavaError)
    code = _jvm_exit(spark, wait=lost or internal or py4j_failed)
    # py4j's calls into a JVM that is going away log tracebacks until the process exits
    # (SparkContext's atexit stop among them): the one line below is what happened.
    logging.getLogger().addFilter(_FromPy4j())
    logging.getLogger("py4j").disabled = True
    # ``text`` first: the causes are fetched from the JVM again, which may be gone by now.
    said = f"{text or ''}\n{_causes(exc)}"
    if code == JVM_OOM_EXIT or any(sign in said for sign in _OOM_SIGNS):
        return (
            f"Spark ran out of memory (--driver-memory {memory}): rerun with more, e.g. "
            "--driver-memory 8g (a message takes about 10 to 15 times its size in memory, "
            "per core), or with fewer cores (--master local[1]); nothing was committed"
        )
    if code is not None or lost:
        how = "ended" if code is None else f"exited with code {code}"
        where = f"its log {log}" if log else "its log above"
        return (
            f"Spark's JVM {how} during the job ({where} says why; when it ran out of "
            f"memory, rerun with more than --driver-memory {memory}); nothing was committed"
        )
    head = first_line(exc, text)
    root = root_cause(said)
    told = head if root is None or root in head else f"{root} ({head[:300]})"
    return f"the Spark job failed: {told}" + (f"; Spark's log: {log}" if log else "")


class _FromPy4j(logging.Filter):
    """Records py4j logs itself, partly through the root logger (``logging.exception``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "/py4j/" not in record.pathname.replace("\\", "/")


@contextmanager
def quiet_py4j() -> Iterator[None]:
    """Leave py4j's tracebacks of a lost JVM connection unshown: the CLI's own one line
    says what happened (out of memory, the JVM ended)."""
    root, py4j = logging.getLogger(), logging.getLogger("py4j")
    quiet = _FromPy4j()
    root.addFilter(quiet)
    disabled, py4j.disabled = py4j.disabled, True
    try:
        yield
    finally:
        root.removeFilter(quiet)
        py4j.disabled = disabled


__all__ = ["JVM_OOM_EXIT", "first_line", "quiet_py4j", "root_cause", "spark_failure"]
