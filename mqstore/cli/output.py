"""What a command writes: its output on stdout, and the errors a user can cause as one line
on stderr (exit code 2), never a traceback."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

import sqlalchemy as sa
import typer
from rich.console import Console

from mqstore.db import STATEMENT_ADVICE, sqlstate
from mqstore.errors import MqstoreError
from mqstore.migration_guards import BROKER_PRIVILEGES

T = TypeVar("T")
#: PostgreSQL refusals of a command's statements a user fixes, by SQLSTATE: what to do.
_DATABASE_ADVICE = {
    "42P01": "this database has no mqstore tables for this --table-prefix; run "
    "`mqstore db upgrade` (or `mqstore db adopt` for ActiveMQ's), or give the prefix",
    "42501": "the DSN's role lacks rights on the tables: as their owner run GRANT "
    f"{', '.join(BROKER_PRIVILEGES)} ON ALL TABLES IN SCHEMA <schema> TO <role>, or use "
    "a DSN whose role has them",
    **STATEMENT_ADVICE,
}
#: What to do when the session ended while a command ran (its committed work stays).
_CONNECTION_LOST = (
    "lost the connection to PostgreSQL: the server restarted, an administrator ended the "
    "session, or the network failed; run the command again"
)


def output_closed() -> NoReturn:
    """The reader of stdout went away (``mqstore stats | head``): stop quietly with
    128 + SIGPIPE, as a tool the signal ends does. Stdout becomes /dev/null, so Python's
    last flush of it does not complain either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise typer.Exit(128 + signal.SIGPIPE)


class OutputConsole(Console):
    """A command's output; a closed pipe ends the command as :func:`output_closed` says
    (rich's own answer is exit code 1, which ``db check`` gives a schema that differs)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        output_closed()


def emit(text: str) -> None:
    """Print machine-readable output (``--json``)."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        output_closed()


console = OutputConsole()
err_console = Console(stderr=True)


def run(fn: Callable[[], T]) -> T:
    """Run a command body; errors a user can cause become one line on stderr, exit code 2."""
    try:
        return fn()
    except MqstoreError as exc:
        message = str(exc)
    except sa.exc.DBAPIError as exc:
        advice = _DATABASE_ADVICE.get(sqlstate(exc))
        if advice is None and exc.connection_invalidated:
            advice = _CONNECTION_LOST
        if advice is None:
            raise
        message = f"{str(exc.orig).splitlines()[0]}: {advice}"
    except OSError as exc:  # a port in use, a directory that cannot be made, ...
        where = f": {exc.filename}" if exc.filename else ""
        message = f"{exc.strerror or exc}{where}"
    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2) from None
