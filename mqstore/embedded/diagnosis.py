"""What went wrong when the embedded PostgreSQL would not start, in one line."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

DSN_HINT = "or pass --dsn (or MQSTORE_DSN) to use another server"


_LOG_PREFIX = re.compile(r"^.*?\b(FATAL|PANIC|ERROR|HINT):\s+")


def first_error(lines: Iterable[str]) -> str | None:
    """The line that says why PostgreSQL failed: its first FATAL/PANIC (else ERROR, else an
    ``initdb: error:``/``pg_ctl:`` line) without the log prefix, with the HINT after it."""
    lines = [line.strip() for line in lines if line.strip()]
    for levels in (("FATAL", "PANIC"), ("ERROR",)):
        for n, line in enumerate(lines):
            match = _LOG_PREFIX.match(line)
            if match and match.group(1) in levels:
                found = f"{match.group(1)}: {' '.join(line[match.end() :].split())}"
                hint = _LOG_PREFIX.match(lines[n + 1]) if n + 1 < len(lines) else None
                if hint and hint.group(1) == "HINT":
                    found += f" ({' '.join(lines[n + 1][hint.end() :].split())})"
                return found
    for line in lines:
        if line.startswith(("initdb: error:", "pg_ctl: ")) and "removing" not in line:
            return " ".join(line.split())
    return None


def remedy(cause: str | None, pgdata: Path, logfile: Path | None) -> str:
    """One clause saying what to do about ``cause``."""
    text = (cause or "").lower()
    where = pgdata.parent
    if "no space left" in text or "disk space" in text or "disk quota" in text:
        action = f"free disk space on the file system of {where} or give another --data-dir"
    elif "read-only file system" in text:
        action = "give a --data-dir on a writable file system"
    elif ("lock file" in text and "already exists" in text) or "still in use" in text:
        action = f"another PostgreSQL is running on {pgdata}: stop it first"
    elif "permission denied" in text or "wrong ownership" in text or "permissions" in text:
        action = f"give {pgdata} back to the user the server runs as (mode 0700)"
    elif "shared memory" in text or "out of memory" in text:
        action = "free memory (or raise the shared-memory limits)"
    elif "incompatible" in text:
        action = f"{pgdata} was made by another PostgreSQL version: use that, or move it away"
    else:
        action = f"see {logfile}" if logfile is not None else "fix the cause"
    return f"{action}, {DSN_HINT}"
