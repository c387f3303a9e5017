"""The ``mqstore`` command: database lifecycle, serve, browse, stats, journal and lock tools.

Every flag mirrors a setting (``MQSTORE_<NAME>``); errors a user can cause print one line
that says what to do, never a traceback.
"""

from __future__ import annotations

import signal
import sys

import typer

from mqstore.cli import contents, db, history, journal, lock, serve
from mqstore.cli.output import err_console

app = typer.Typer(
    help="mqstore: ActiveMQ-compatible message store on PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
# In this order in --help: the commands, then the groups.
app.command("serve")(serve.serve)
app.command("browse")(contents.browse)
app.command("stats")(contents.stats)
app.add_typer(db.db_app, name="db")
app.add_typer(journal.journal_app, name="journal")
app.add_typer(lock.lock_app, name="lock")
app.add_typer(history.history_app, name="history")


def _register_spark() -> None:
    try:
        from spark_etl.cli import register
    except ImportError:  # the spark extra's CLI is optional
        return
    register(app)


_register_spark()


#: What the ``spark`` extra installs for ``mqstore export`` and ``audit`` to import.
_SPARK_EXTRA_MODULES = ("pyspark", "py4j", "pyarrow", "pandas")


def _terminated(signum: int, _frame: object) -> None:
    """SIGTERM (a supervisor, ``kill``, ``timeout``) or SIGHUP (the terminal closed) ends a
    command as Ctrl-C does: through its cleanup, so an embedded server it started is stopped
    (``serve`` stops gracefully)."""
    raise SystemExit(128 + signum)


def main() -> None:
    """Console entry point."""
    from mqstore.embedded.server import stop_signals

    for signum in stop_signals():
        if signum != signal.SIGINT:  # that is Python's KeyboardInterrupt: exit 130 below
            signal.signal(signum, _terminated)
    try:
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # ignored stays ignored
            # From here Ctrl-C is a KeyboardInterrupt, for the command's cleanup (the entry
            # point answered it at once while the modules were imported).
            signal.signal(signal.SIGINT, signal.default_int_handler)
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except ModuleNotFoundError as exc:  # a Spark job run without the spark extra
        if (exc.name or "").split(".")[0] not in _SPARK_EXTRA_MODULES:
            raise
        err_console.print(
            "[red]error:[/red] PySpark is not installed: pip install 'mqstore\\[spark]'",
            highlight=False,
        )
        sys.exit(1)  # the Spark jobs' code for what a user gets wrong


__all__ = ["app", "main"]
