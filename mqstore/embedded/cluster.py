"""What a data directory holds: an initialised cluster, and the server running on it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def store_exists(data_dir: Path) -> bool:
    """Whether ``data_dir`` holds an initialised embedded cluster."""
    return initialised(data_dir.resolve() / "pg")


def initialised(pgdata: Path) -> bool:
    """A cluster initdb finished: ``global/pg_control`` exists. (A directory mqstore cannot
    look into counts as initialised: starting it then reports why.)"""
    try:
        return (pgdata / "global" / "pg_control").is_file()
    except PermissionError:
        return True


@dataclass(frozen=True)
class Postmaster:
    """What ``postmaster.pid`` says (PostgreSQL writes 7 lines, then a status line)."""

    pid: int
    socket_dir: Path | None
    port: int
    status: str

    @classmethod
    def read(cls, pgdata: Path) -> Postmaster | None:
        try:
            lines = (pgdata / "postmaster.pid").read_text().splitlines()
        except (FileNotFoundError, NotADirectoryError):
            return None
        lines += [""] * (8 - len(lines))
        try:
            pid = int(lines[0])
        except ValueError:
            return None
        port = int(lines[3]) if lines[3].strip().isdigit() else 5432
        socket_dir = Path(lines[4].strip()) if lines[4].strip() else None
        return cls(pid, socket_dir, port, lines[7].strip())


def serves(pid: int, pgdata: Path) -> bool:
    """Whether ``pid`` is alive and, where /proc tells, a postgres working in ``pgdata``
    (a postmaster's working directory is its data directory). The directories are compared,
    not their paths: ``pgdata`` may be a symlink (a cluster moved to another disk), and the
    kernel gives a process's working directory without symlinks."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    proc = Path(f"/proc/{pid}")
    if not Path("/proc/self").exists():
        return True  # no /proc (macOS): kill(0) is all we know
    try:
        if (proc / "comm").read_text().strip() != "postgres":
            return False
        cwd = os.stat(proc / "cwd")
    except FileNotFoundError:
        return False  # gone meanwhile
    except OSError:
        return True  # not ours to look at: trust kill(0)
    try:
        data = os.stat(pgdata)
    except (FileNotFoundError, NotADirectoryError):
        return False  # no data directory: nothing serves it
    except OSError:
        return True  # cannot tell: trust kill(0)
    return (cwd.st_dev, cwd.st_ino) == (data.st_dev, data.st_ino)
