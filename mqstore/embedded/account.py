"""Root only: the unprivileged account the embedded server runs as, and its way in.

PostgreSQL refuses to run as root. The server then runs as the owner of an existing
cluster, or else as the system user :data:`SERVER_USER`, created without a login shell,
home or password. Where that user cannot pass through a directory above the data or the
binaries, it alone gets traverse there by an ACL entry; no directory's mode is changed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mqstore.embedded.acl import grant_traverse
from mqstore.embedded.cluster import initialised
from mqstore.embedded.diagnosis import DSN_HINT
from mqstore.errors import DatabaseUnavailableError

log = logging.getLogger(__name__)

#: The system user the server runs as when mqstore runs as root (PostgreSQL refuses root).
SERVER_USER = "mqstore-pg"
_NO_LOGIN_SHELLS = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")


@dataclass(frozen=True)
class ServerAccount:
    """The unprivileged account the server runs as (only when mqstore runs as root)."""

    name: str
    uid: int
    gid: int


def server_account(pgdata: Path) -> ServerAccount | None:
    """None unless mqstore runs as root; then the owner of an existing cluster, or else the
    system user :data:`SERVER_USER` (created without a login shell if it does not exist)."""
    if os.geteuid() != 0:
        return None
    try:
        st = pgdata.stat()
    except FileNotFoundError:
        st = None
    if st is not None and st.st_uid != 0 and initialised(pgdata):
        try:
            entry = pwd.getpwuid(st.st_uid)
            return ServerAccount(entry.pw_name, st.st_uid, entry.pw_gid)
        except KeyError:
            return ServerAccount(str(st.st_uid), st.st_uid, st.st_gid)
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        entry = _create_system_user()
    return ServerAccount(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _create_system_user() -> pwd.struct_passwd:
    shell = next((s for s in _NO_LOGIN_SHELLS if os.path.exists(s)), "/bin/false")
    useradd = shutil.which("useradd") or next(
        (p for p in ("/usr/sbin/useradd", "/sbin/useradd") if os.path.exists(p)), None
    )
    command = [
        "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
        "--shell", shell, "--comment", "mqstore embedded PostgreSQL", SERVER_USER,
    ]  # fmt: skip
    problem = "useradd is not installed"
    if useradd is not None:
        result = subprocess.run(
            [useradd, *command], capture_output=True, text=True, timeout=60, check=False
        )
        problem = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[0]
        with contextlib.suppress(KeyError):  # made now, or by a process racing with us
            entry = pwd.getpwnam(SERVER_USER)
            log.warning(
                "running as root: created the system user %s (no login shell) for the "
                "embedded PostgreSQL, which refuses to run as root",
                SERVER_USER,
            )
            return entry
    raise DatabaseUnavailableError(
        f"PostgreSQL refuses to run as root and the system user {SERVER_USER} could not be "
        f"created ({problem}): create it (useradd {' '.join(command)}), run mqstore as a "
        f"non-root user, {DSN_HINT}"
    )


def _ancestry(paths: Sequence[Path]) -> list[Path]:
    """Every directory from ``/`` down to each of ``paths``, in order, without repeats."""
    seen: dict[Path, None] = {}
    for path in paths:
        for directory in [*reversed(path.parents), path]:
            seen.setdefault(directory, None)
    return list(seen)


def _blocked(account: ServerAccount, directories: Sequence[Path]) -> Path | None:
    """The first of ``directories`` ``account`` cannot ``cd`` into (the kernel's own check,
    ACLs included), or None."""
    script = 'for d in "$@"; do (cd "$d") 2>/dev/null || { printf "%s" "$d"; exit 0; }; done'
    result = subprocess.run(
        ["/bin/sh", "-c", script, "sh", *map(str, directories)],
        capture_output=True, text=True, cwd="/", timeout=60, check=False,
        user=account.uid, group=account.gid, extra_groups=[],
    )  # fmt: skip
    return Path(result.stdout) if result.stdout else None


def ensure_traverse(account: ServerAccount, targets: Sequence[Path]) -> None:
    """Let ``account`` reach ``targets``: on each directory on the way it cannot pass
    through, add a POSIX ACL entry giving it (and nobody else) traverse only."""
    directories = _ancestry(targets)
    granted: set[Path] = set()
    while (blocked := _blocked(account, directories)) is not None:
        if blocked in granted:
            raise DatabaseUnavailableError(
                f"the embedded PostgreSQL's user {account.name} cannot pass through {blocked} "
                f"even with an ACL entry; give it traverse there (setfacl -m "
                f"u:{account.name}:x {blocked}), give a --data-dir it can reach, {DSN_HINT}"
            )
        try:
            grant_traverse(blocked, account.uid)
        except OSError as exc:
            raise DatabaseUnavailableError(
                f"the embedded PostgreSQL runs as {account.name} (PostgreSQL refuses root), "
                f"which cannot pass through {blocked}, and an ACL entry for it could not be "
                f"added ({exc.strerror or exc}): give it traverse yourself (setfacl -m "
                f"u:{account.name}:x {blocked}, or chmod o+x {blocked}), give a --data-dir "
                f"and a virtualenv it can reach, run mqstore as a non-root user, {DSN_HINT}"
            ) from None
        log.warning(
            "running as root: gave the embedded PostgreSQL's user %s traverse (x, no read) "
            "on %s with an ACL entry (undo: setfacl -x u:%s %s)",
            account.name, blocked, account.name, blocked,
        )  # fmt: skip
        granted.add(blocked)
