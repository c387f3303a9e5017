"""The ``mqstore`` command's entry point (its console script and ``python -m mqstore``).

Python takes about a second to import the CLI. A Ctrl-C in that time is answered here,
before those imports: nothing is done yet that needs undoing, so the command exits 130 at
once and quietly, as an interrupted command does. :func:`mqstore.cli.main` hands SIGINT
back to Python's ``KeyboardInterrupt``, which a running command's cleanup relies on.
"""

from __future__ import annotations

import os
import signal


def interrupted_while_starting(signum: int, _frame: object) -> None:
    """SIGINT before a command runs: exit ``128 + signum`` at once."""
    os._exit(128 + signum)


def main() -> None:
    """Console entry point: :func:`mqstore.cli.main`, with Ctrl-C answered from the start."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # ignored stays ignored
        signal.signal(signal.SIGINT, interrupted_while_starting)
    from mqstore.cli import main as run_cli

    run_cli()
