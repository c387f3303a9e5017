"""Running Alembic's own command line, as an operator does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def alembic(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """``python -m alembic ARGS`` from ``cwd`` (the repository root), with no environment
    but PATH: the DSN and prefix come from ``-x`` arguments only."""
    return subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
