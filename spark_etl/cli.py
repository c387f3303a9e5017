"""``mqstore export`` and ``mqstore audit``: the Spark jobs as Typer commands.

PySpark is imported only when a command runs, so ``mqstore --help`` works without it.
``register(app)`` adds the commands to the main ``mqstore`` app; ``python -m spark_etl``
and ``spark-submit spark_etl/submit.py`` run them on their own. Whatever a user can cause
ends in one line on stderr (:mod:`.job_failure` words a job that failed inside Spark).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Annotated, Any

import typer

from .job_failure import first_line, quiet_py4j, spark_failure
from .launch import check_options, fail, log_file, require_pyspark
from .launch import start_session as _session  # by this name, tests stand in for it

#: Exit code when the audit crosses a configured threshold.
EXIT_THRESHOLD = 3
#: Where ``mqstore serve`` keeps its embedded store by default (``MQSTORE_DATA_DIR``).
EMBEDDED_DATA_DIR = "mqstore-data"
#: Tables each job reads (``history`` is optional).
EXPORT_TABLES = ("ACTIVEMQ_MSGS",)
AUDIT_TABLES = ("ACTIVEMQ_MSGS", "ACTIVEMQ_ACKS", "ACTIVEMQ_LOCK")

Dsn = Annotated[
    str | None,
    typer.Option(
        "--dsn",
        envvar="MQSTORE_DSN",
        help="postgresql://USER[:PW]@HOST[:PORT]/DB; unset: the embedded store in ./mqstore-data",
        show_default=False,
    ),
]
Prefix = Annotated[
    str,
    typer.Option("--table-prefix", envvar="MQSTORE_TABLE_PREFIX", help="ActiveMQ tablePrefix"),
]
Memory = Annotated[
    str,
    typer.Option(
        "--driver-memory",
        envvar="MQSTORE_SPARK_DRIVER_MEMORY",
        help="JVM heap of a local run, e.g. 2g, 8g (under spark-submit: its --driver-memory)",
    ),
]
Master = Annotated[
    str | None,
    typer.Option("--master", help="Spark master (default local[*]; unset under spark-submit)"),
]


def _directory(option: str) -> Callable[[str], Path]:
    """A parser of ``option``'s directory that refuses an empty value (an unset shell
    variable), which would otherwise mean the current directory."""

    def parse(value: str) -> Path:
        if not value.strip():
            raise fail(f"error: {option} is empty: give a directory")
        return Path(value)

    return parse


class _ConsoleWarnings(logging.Handler):
    """Shows the jobs' warnings as ``warning: ...`` lines on a Rich console (stderr)."""

    def __init__(self, console: Any) -> None:
        super().__init__(logging.WARNING)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        from rich.text import Text

        self.console.print(Text(f"warning: {record.getMessage()}"), soft_wrap=True)


@contextmanager
def _warnings_on(console: Any) -> Iterator[None]:
    """Route the ``spark_etl`` loggers' warnings to ``console`` (only there) meanwhile."""
    logger, handler = logging.getLogger("spark_etl"), _ConsoleWarnings(console)
    propagate, logger.propagate = logger.propagate, False
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _stop(spark: Any) -> None:
    """Stop ``spark``; a JVM that is already gone (out of memory, killed) is not an error."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]

    with quiet_py4j(), suppress(Py4JError, OSError):
        spark.stop()


def _run(
    action: Callable[[], Any], spark: Any = None, memory: str = "2g", log: Path | None = None
) -> Any:
    """Run a job; whatever a user can cause becomes one line on stderr and exit code 1.
    ``spark`` (and its ``memory``) is the session a failure inside Spark comes from, ``log``
    where its JVM logs."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    from mqstore.errors import MqstoreError

    from .sources import SourceError

    try:
        with quiet_py4j():
            return action()
    except (SourceError, MqstoreError) as exc:
        message = str(exc)
    except (PySparkException, Py4JError, OSError) as exc:
        if spark is not None and not (isinstance(exc, OSError) and exc.filename):
            message = spark_failure(exc, spark, memory, log)  # inside Spark, or JVM gone
        elif isinstance(exc, OSError):  # --out unwritable, disk full, ...
            where = f": {exc.filename}" if exc.filename else ""
            message = f"{exc.strerror or exc}{where}"
        else:
            message = f"the Spark job failed: {first_line(exc)}"
    raise fail(f"error: {message}")


def _source(dsn: str | None, master: str | None, held: ExitStack) -> str:
    """The DSN the job reads: ``dsn``, or else the embedded store's (``mqstore serve``
    with no DSN) through a loopback endpoint held open by ``held``; a one-line error
    (exit code 1) when there is neither.

    The embedded server listens on a Unix socket only, and the PostgreSQL JDBC driver
    speaks TCP only: the endpoint (:class:`mqstore.embedded.LoopbackEndpoint`) listens on
    127.0.0.1 for this job alone (a random password) and its sessions are read-only.
    Started here when no broker runs on the store, the server stops again with the job.
    """
    if dsn:
        return dsn
    from mqstore.embedded import store_exists

    # mqstore.settings' data_dir (not imported: it pulls in the journal, which the Spark
    # jobs must not import)
    data_dir = Path(os.environ.get("MQSTORE_DATA_DIR") or EMBEDDED_DATA_DIR).expanduser()
    if not store_exists(data_dir):
        raise fail(
            "error: no --dsn given and no embedded store in "
            f"{data_dir if data_dir.is_absolute() else f'./{data_dir}'}: pass --dsn "
            "postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME (or set MQSTORE_DSN) of the "
            "database the broker stores in"
        )
    if master is not None and not master.startswith("local"):
        raise fail(
            f"error: --master {master}: the embedded store in {data_dir} is reachable from "
            "this machine only; run with a local master (local[*] is the default) or pass "
            "--dsn of a PostgreSQL the cluster can reach"
        )
    from mqstore.embedded import EmbeddedPostgres, LoopbackEndpoint

    server = EmbeddedPostgres(data_dir, stop_on_close=True)
    held.callback(server.close)
    _run(server.start)
    assert server.socket_path is not None
    endpoint = held.enter_context(LoopbackEndpoint(str(server.socket_path)))
    return endpoint.dsn()


def _writable(out: Path) -> None:
    """Make ``out`` and check it can be written, before a job spends its time."""
    from .archive_guard import unwritable

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, unwritable(out, exc)) from None
    if not os.access(out, os.W_OK):
        raise OSError(errno.EACCES, f"--out {out} is not writable: give a directory you can write")


def _preflight(dsn: str, prefix: str, out: Path, tables: tuple[str, ...]) -> Any:
    """Check ``--out``, the DSN, the database and its tables before Spark starts.

    Returns the database's identity. Each problem is one line and exit code 1.
    """
    require_pyspark()
    from .sources import inspect_database

    def check() -> Any:
        if out.exists() and not out.is_dir():
            raise OSError(f"--out {out} is not a directory: give a directory")
        return inspect_database(dsn, prefix, tables)

    return _run(check)


def export_command(
    out: Annotated[
        Path,
        typer.Option(
            "--out", parser=_directory("--out"), help="output directory (Parquet + watermarks)"
        ),
    ],
    dsn: Dsn = None,
    table_prefix: Prefix = "",
    master: Master = None,
    driver_memory: Memory = "2g",
    keep_msg: Annotated[
        bool, typer.Option("--keep-msg/--no-keep-msg", help="keep the raw MSG bytes")
    ] = True,
) -> None:
    """Export new messages and history to Parquet (incremental; safe to re-run)."""
    from rich.console import Console
    from rich.progress import Progress

    driver_memory = check_options(master, driver_memory)  # before anything is created
    from .export import STEPS, check_archive, export, export_lock

    with ExitStack() as held:  # the source and the directory's lock, held to the end
        source = _source(dsn, master, held)
        identity = _preflight(source, table_prefix, out, EXPORT_TABLES)
        lock = _run(lambda: held.enter_context(export_lock(out)))
        _run(lambda: check_archive(lock.directory, identity, table_prefix))
        log = log_file(out, "export")
        spark = _session(master, driver_memory, log)
        console = Console(stderr=True)
        try:
            with _warnings_on(console), Progress(console=console, transient=True) as bar:
                task = bar.add_task("export", total=len(STEPS))
                seen: list[str] = []

                def step(name: str) -> None:
                    if seen:
                        bar.advance(task)
                    seen.append(name)
                    bar.update(task, description=f"export: {name}")

                result = _run(
                    lambda: export(
                        spark,
                        source,
                        out,
                        table_prefix,
                        keep_msg=keep_msg,
                        progress=step,
                        lock=lock,
                    ),
                    spark,
                    driver_memory,
                    log,
                )
                bar.update(task, completed=len(STEPS), description="export: done")
        finally:
            _stop(spark)
    Console().print(summary_table(result))


def summary_table(result: Any) -> Any:
    """The rows per destination a run added, as a Rich table; names are shown as they are
    (a ``[...]`` in one is text, not Rich markup)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"run {result.run_id} ({result.seconds:.1f} s)")
    for col in ("destination", "messages", "history"):
        table.add_column(col, justify="left" if col == "destination" else "right")
    for dest in sorted(set(result.messages) | set(result.history)):
        counts = (str(result.messages.get(dest, 0)), str(result.history.get(dest, 0)))
        table.add_row(Text(dest), *counts)
    table.add_row("total", str(result.message_rows), str(result.history_rows))
    return table


def audit_command(
    out: Annotated[
        Path,
        typer.Option(
            "--out", parser=_directory("--out"), help="directory for audit.json / audit.html"
        ),
    ],
    dsn: Dsn = None,
    table_prefix: Prefix = "",
    master: Master = None,
    driver_memory: Memory = "2g",
    max_depth: Annotated[int | None, typer.Option(min=0, help="messages per destination")] = None,
    max_backlog: Annotated[int | None, typer.Option(min=0, help="pending per subscription")] = None,
    max_pending_age: Annotated[
        float | None, typer.Option(min=0, help="seconds, oldest pending per subscription")
    ] = None,
    max_expired: Annotated[int | None, typer.Option(min=0, help="expired but still stored")] = None,
    max_in_doubt: Annotated[int | None, typer.Option(min=0, help="XA-prepared rows")] = None,
    max_malformed_xids: Annotated[
        int | None, typer.Option(min=0, help="XID values XA recovery refuses")
    ] = None,
    max_undecodable: Annotated[
        int | None, typer.Option(min=0, help="MSG values that do not decode")
    ] = None,
    max_duplicates: Annotated[
        int | None, typer.Option(min=0, help="duplicate JMS message ids")
    ] = None,
    max_priority_out_of_range: Annotated[
        int | None, typer.Option(min=0, help="rows whose PRIORITY is not 0 to 9")
    ] = None,
    max_container_mismatches: Annotated[
        int | None, typer.Option(min=0, help="rows whose CONTAINER is not MSG's destination")
    ] = None,
    max_msgid_mismatches: Annotated[
        int | None, typer.Option(min=0, help="rows whose MSGID_PROD/SEQ are not MSG's id")
    ] = None,
    max_lease_age: Annotated[
        float | None, typer.Option(min=0, help="seconds past the lease")
    ] = None,
    archive: Annotated[
        Path | None,
        typer.Option(
            "--archive",
            parser=_directory("--archive"),
            help="export directory whose history is counted (trimmed or plain ActiveMQ history)",
        ),
    ] = None,
    prioritized_messages: Annotated[
        bool,
        typer.Option(
            "--prioritized-messages/--no-prioritized-messages",
            envvar="MQSTORE_PRIORITIZED_MESSAGES",
            help="the store has ActiveMQ's prioritizedMessages: count each subscription's "
            "backlog per priority (off: every message after its least LAST_ACKED_ID)",
        ),
    ] = False,
) -> None:
    """Audit the store; writes audit.json and audit.html; exit 3 when a threshold is crossed."""
    driver_memory = check_options(master, driver_memory)  # before anything is created
    with ExitStack() as held:  # the source, held until Spark has stopped
        source = _source(dsn, master, held)
        identity = _preflight(source, table_prefix, out, AUDIT_TABLES)
        from .archive_guard import history_archive

        _run(lambda: _writable(out))  # before Spark starts
        _run(lambda: history_archive(out, archive, identity, table_prefix))
        log = log_file(out, "audit")
        spark = _session(master, driver_memory, log)
        from .audit import Thresholds, anomaly_summary, audit

        limits = Thresholds(
            max_depth=max_depth,
            max_backlog=max_backlog,
            max_pending_age_s=max_pending_age,
            max_expired=max_expired,
            max_in_doubt=max_in_doubt,
            max_malformed_xids=max_malformed_xids,
            max_undecodable=max_undecodable,
            max_duplicates=max_duplicates,
            max_priority_out_of_range=max_priority_out_of_range,
            max_container_mismatches=max_container_mismatches,
            max_msgid_mismatches=max_msgid_mismatches,
            max_lease_age_s=max_lease_age,
        )
        try:
            report = _run(
                lambda: audit(
                    spark,
                    source,
                    out,
                    table_prefix,
                    limits,
                    archive=archive,
                    prioritized=prioritized_messages,
                ),
                spark,
                driver_memory,
                log,
            )
        finally:
            _stop(spark)
    counts = report["counts"]
    prepared = counts["prepared_messages"]
    anomalies = anomaly_summary(counts)
    typer.echo(
        f"{counts['messages']} messages"
        + (f" (and {prepared} XA-prepared)" if prepared else "")
        + f" in {len(report['destinations'])} destinations, "
        f"{len(report['subscriptions'])} subscriptions "
        f"(backlog: {report['backlog_rule']['mode']}); lock: {_lock_summary(report['lock'])}; "
        + (f"anomalies: {anomalies}; " if anomalies else "")
        + f"report: {out / 'audit.html'}"
    )
    if report["lock"]["row_lock_error"] and report["lock"]["state"] == "unknown":
        typer.echo(report["lock"]["row_lock_error"], err=True)
    if malformed := counts["malformed_xids"]:
        typer.echo(
            f"{malformed} row(s) hold an XID that is not ActiveMQ's encoding of prepared XA "
            f"work (malformed_xids in {out / 'audit.json'}): {report['malformed_xids_advice']}",
            err=True,
        )
    for violation in report["violations"]:
        typer.echo(f"threshold crossed: {violation}", err=True)
    if report["violations"]:
        raise typer.Exit(EXIT_THRESHOLD)


def _lock_summary(lock: dict[str, Any]) -> str:
    """The lock section in a few words: its state, and the lease holder when there is one."""
    holder = lock["holder"]
    return f"{lock['state']} by {holder}" if holder and lock["state"] != "free" else lock["state"]


def register(app: typer.Typer) -> None:
    """Add ``export`` and ``audit`` to the ``mqstore`` Typer app."""
    app.command("export")(export_command)
    app.command("audit")(audit_command)


def main() -> None:
    """Stand-alone entry point (``python -m spark_etl``, ``spark-submit .../submit.py``)."""
    app = typer.Typer(
        rich_markup_mode=None, add_completion=False, no_args_is_help=True, help="mqstore Spark jobs"
    )
    register(app)
    app()


__all__ = [
    "AUDIT_TABLES",
    "EXIT_THRESHOLD",
    "EXPORT_TABLES",
    "audit_command",
    "export_command",
    "main",
    "register",
    "summary_table",
]
