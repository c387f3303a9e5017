"""The embedded PostgreSQL for running without a server: the binaries come from the
``pgserver`` package, the data lives under ``<data_dir>/pg``, and the server listens on a
Unix socket only (in ``<data_dir>/pg``, mode 0700).

mqstore runs the steps itself (initdb, ``pg_ctl start``/``stop``) rather than through
``pgserver.get_server``, for four reasons:

* **root.** PostgreSQL refuses to run as root. pgserver then adds a login user ``pgserver``
  (``/bin/bash``) and makes every parent directory of the data up to ``/`` world-readable.
  Here, as root, the server runs as the owner of an existing cluster, or else as the system
  user ``mqstore-pg``, which is created without a login shell, home or password. Where that
  user cannot pass through a parent directory of the data or of the binaries, it alone is
  given traverse (``x``, never read) by a POSIX ACL entry on that directory. No mode bit of
  any directory outside the data is changed; without ACL support mqstore refuses and says
  what to do.
* **atomic initialisation.** initdb runs in a sibling ``pg.init-*`` directory, which is
  renamed to ``pg`` only once it is complete, so a kill or a full disk during the first
  start leaves nothing half-made. A ``pg`` without ``global/pg_control`` (left by an older
  mqstore) holds no data yet and is made again; an empty ``pg`` is refused (a disk that
  should be mounted there is not).
* **clear failures.** A failed start reports the server's own FATAL line and what to do.
* **who stops the server.** Each process using the server holds a shared ``flock`` on
  ``<data_dir>/.pg-users`` (the kernel drops it when a process dies, even by SIGKILL); the
  last one to close, the only one that can take the lock exclusively, stops the server.
  Starting, initialising and stopping happen under an exclusive ``flock`` on
  ``<data_dir>/.pg-start`` (see :mod:`mqstore.embedded.startlock`).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import logging
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from mqstore.embedded import startlock
from mqstore.embedded.account import ServerAccount, ensure_traverse, server_account
from mqstore.embedded.cluster import Postmaster, initialised, serves
from mqstore.embedded.diagnosis import DSN_HINT, first_error, remedy
from mqstore.errors import DatabaseUnavailableError

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 60
#: How long a start stopped by a signal looks for a server pg_ctl forked before it died.
_APPEARING_S = 5.0
#: ``postmaster.pid`` statuses of a server that takes no connections yet: "standby" is a
#: recovery with hot_standby off, which ``pg_ctl start -w`` takes for started.
_STARTING = ("", "starting", "standby")


class EmbeddedPostgres:
    """A local PostgreSQL server in ``data_dir``; reused if it is already running, and with
    ``stop_on_close`` stopped by the last process that used it."""

    def __init__(self, data_dir: Path, *, stop_on_close: bool = False) -> None:
        self.root = data_dir.resolve()
        self.data_dir = self.root / "pg"
        self._stop_on_close = stop_on_close
        self._account: ServerAccount | None = None
        self._users_fd: int | None = None
        self.socket_path: Path | None = None  #: the server's Unix socket, once started

    # -- start -------------------------------------------------------------------------

    def start(self) -> str:
        """Start (or attach to) the server and return a ``postgresql://`` DSN."""
        _check_path(self.data_dir)
        bin_dir = binaries_dir()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            start_lock = os.open(self.root / ".pg-start", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise DatabaseUnavailableError(
                f"cannot use {self.root} for the embedded PostgreSQL: "
                f"{exc.strerror or exc}: {exc.filename or self.root}; give a writable "
                f"--data-dir (or MQSTORE_DATA_DIR), {DSN_HINT}"
            ) from None
        locked = False
        try:
            startlock.take(start_lock, self.data_dir, "starting")
            locked = True
            self._account = server_account(self.data_dir)
            if self._account is not None:
                ensure_traverse(self._account, [self.root, bin_dir.parent])
            if not initialised(self.data_dir):
                self._initialise(bin_dir)
            running = self._running()
            if running is None:
                self._remove_stale_lock_files()
                # Ctrl-C, SIGTERM or SIGHUP now would leave a server nobody uses: they
                # wait until it is ours (close() stops it) or, failed, stopped again.
                with signals_held() as held:
                    try:
                        running = self._start_server(bin_dir)
                    except DatabaseUnavailableError:
                        if held:  # pg_ctl died of the same Ctrl-C; the server may go on
                            self._stop_server(appearing_s=_APPEARING_S)
                        raise
                    self._use()
            else:
                self._use()
        except OSError as exc:
            cause = f"{exc.strerror or exc}: {exc.filename or self.data_dir}"
            raise DatabaseUnavailableError(
                f"could not start the embedded PostgreSQL in {self.data_dir}: {cause}; "
                f"{remedy(cause, self.data_dir, None)}"
            ) from None
        finally:
            if locked:
                startlock.release(start_lock)
            else:
                os.close(start_lock)
        socket_dir = self._socket_dir(running)
        self.socket_path = Path(socket_dir) / f".s.PGSQL.{running.port}"
        uri = f"postgresql://postgres:@/postgres?host={quote(str(socket_dir), safe='/')}"
        if running.port != 5432:
            uri += f"&port={running.port}"
        log.info("embedded PostgreSQL running in %s", self.data_dir)
        return uri

    def _socket_dir(self, running: Postmaster) -> Path:
        """The server's socket directory: the data directory, by the path used now, where
        mqstore starts it (``postmaster.pid`` keeps the path it had then, gone if the data
        directory was renamed since); else where ``postmaster.pid`` says."""
        if (self.data_dir / f".s.PGSQL.{running.port}").exists():
            return self.data_dir
        return running.socket_dir or self.data_dir

    def _use(self) -> None:
        """Count this process as a user of the server (a shared flock on ``.pg-users``)."""
        users = os.open(self.root / ".pg-users", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(users, fcntl.LOCK_SH)
        self._users_fd = users

    def _initialise(self, bin_dir: Path) -> None:
        """initdb into a temporary sibling, then rename it to ``pg`` (under the start lock)."""
        for stale in self.root.glob("pg.init-*"):  # left by a first start that was killed
            _terminate_users_of(stale)
            shutil.rmtree(stale, ignore_errors=True)
        if self.data_dir.is_symlink() and not self.data_dir.exists():
            raise DatabaseUnavailableError(
                f"{self.data_dir} is a symlink to {os.readlink(self.data_dir)}, which does "
                "not exist: mount the disk the cluster is on, or fix the link"
            )
        if self.data_dir.exists() and not any(self.data_dir.iterdir()):
            # No initdb leaves it empty: a disk that should be mounted here (a cluster moved
            # to it) is not. Made anew, the broker would start on an empty store.
            raise DatabaseUnavailableError(
                f"{self.data_dir} is an empty directory, not a PostgreSQL cluster: if a disk "
                "holding the store is to be mounted there, mount it; to start a new store, "
                "remove the directory"
            )
        if self.data_dir.exists():  # half-made by an older mqstore's initdb: no data yet
            log.warning("%s was never completely initialised: making it again", self.data_dir)
            _terminate_users_of(self.data_dir)
            shutil.rmtree(self.data_dir)
        log.info("initialising the embedded PostgreSQL in %s", self.data_dir)
        staging = Path(tempfile.mkdtemp(prefix="pg.init-", dir=self.root))
        try:
            if self._account is not None:
                os.chown(staging, self._account.uid, self._account.gid)
            # The C locale, not the caller's: LANG/LC_* may name a locale this machine does
            # not have (ssh passes them on), and then initdb refuses; the store sorts and
            # compares no text by a language's rules.
            result = self._run(
                bin_dir / "initdb", "-D", str(staging), "--auth=trust", "--auth-local=trust",
                "--encoding=utf8", "--no-locale", "-U", "postgres", timeout=300,
            )  # fmt: skip
            if result.returncode != 0:
                cause = first_error(result.stderr.splitlines() + result.stdout.splitlines())
                raise DatabaseUnavailableError(
                    f"could not initialise the embedded PostgreSQL in {self.data_dir}: "
                    f"{cause or f'initdb exited with {result.returncode}'}; "
                    f"{remedy(cause, self.data_dir, None)}"
                )
            os.rename(staging, self.data_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _fsync_dir(self.root)

    def _running(self) -> Postmaster | None:
        """The server running on this data directory, once it is ready; None if none is."""
        deadline = time.monotonic() + _START_TIMEOUT_S
        said = False
        while True:
            info = Postmaster.read(self.data_dir)
            if info is None or not serves(abs(info.pid), self.data_dir):
                return None  # a stale postmaster.pid: see _remove_stale_lock_files
            if info.pid < 0:
                raise DatabaseUnavailableError(
                    f"a single-user PostgreSQL (pid {-info.pid}) is using {self.data_dir}: "
                    f"let it finish or stop it, {DSN_HINT}"
                )
            if info.status == "ready":
                return info
            starting = info.status in _STARTING
            if time.monotonic() > deadline:
                if starting:
                    raise self._still_starting(info)
                raise DatabaseUnavailableError(
                    f"the embedded PostgreSQL in {self.data_dir} (pid {info.pid}) has been "
                    f"{info.status} for {_START_TIMEOUT_S} s; see "
                    f"{self.data_dir / 'log'}, {DSN_HINT}"
                )
            if starting and not said:
                log.warning(
                    "waiting for the embedded PostgreSQL in %s (pid %d) to finish starting "
                    "(after a crash it first recovers; see %s)",
                    self.data_dir, info.pid, self.data_dir / "log",
                )  # fmt: skip
                said = True
            time.sleep(0.2)  # being started (or stopped) by a process that was killed

    def _still_starting(self, info: Postmaster) -> DatabaseUnavailableError:
        """The error for a server that is not ready after the start timeout but goes on
        starting (crash recovery can take longer): left running, it is used once ready."""
        return DatabaseUnavailableError(
            f"the embedded PostgreSQL in {self.data_dir} (pid {info.pid}) is still starting "
            f"after {_START_TIMEOUT_S} s (after a crash it first recovers, which can take "
            f"long) and goes on in the background: leave it running, and run the command "
            f"again once {self.data_dir / 'log'} says 'database system is ready to accept "
            f"connections' (a command run sooner waits up to {_START_TIMEOUT_S} s for that)"
        )

    def _remove_stale_lock_files(self) -> None:
        """Remove the lock files of a server that is gone (under the start lock). PostgreSQL
        removes them itself only when their pid is dead, and refuses to start ("lock file
        already exists") when, after a crash and a reboot, another process has that pid."""
        for lock in (self.data_dir / "postmaster.pid", *self.data_dir.glob(".s.PGSQL.*.lock")):
            try:
                pid = int(lock.read_text().split("\n", 1)[0])
            except (OSError, ValueError):
                continue  # gone, or unreadable: PostgreSQL decides
            if not serves(abs(pid), self.data_dir):
                log.warning("removing %s of a server that is gone (pid %d)", lock, pid)
                with contextlib.suppress(FileNotFoundError):
                    lock.unlink()

    def _start_server(self, bin_dir: Path) -> Postmaster:
        logfile = self.data_dir / "log"
        try:
            offset = logfile.stat().st_size
        except FileNotFoundError:
            offset = 0
        options = f'-h "" -k {shlex.quote(str(self.data_dir))}'  # no TCP; socket in pgdata
        result = self._run(
            bin_dir / "pg_ctl", "-D", str(self.data_dir), "-w", "-t", str(_START_TIMEOUT_S),
            "-l", str(logfile), "-o", options, "start", timeout=_START_TIMEOUT_S + 30,
        )  # fmt: skip
        info = Postmaster.read(self.data_dir)
        if result.returncode == 0 and info is not None and info.status == "ready":
            return info
        if info is not None and info.status in _STARTING and serves(info.pid, self.data_dir):
            if result.returncode != 0:  # pg_ctl gave up waiting; the server goes on
                raise self._still_starting(info)
            running = self._running()  # "standby": pg_ctl is done, recovery is not
            if running is not None:
                return running
        try:
            with logfile.open("rb") as f:
                f.seek(offset)
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            lines = []
        cause = first_error(lines + result.stderr.splitlines() + result.stdout.splitlines())
        raise DatabaseUnavailableError(
            f"the embedded PostgreSQL in {self.data_dir} did not start: "
            f"{cause or f'pg_ctl exited with {result.returncode}'}; "
            f"{remedy(cause, self.data_dir, logfile)}"
        )

    def _run(self, *args: str | Path, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL program, as the server's account when mqstore runs as root."""
        account = self._account
        try:
            # Output to files, not pipes: pg_ctl's server would inherit a pipe and hold it.
            with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
                command = [str(a) for a in args]
                if account is None:
                    proc = subprocess.run(
                        command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd="/",
                        timeout=timeout, check=False,
                    )  # fmt: skip
                else:
                    proc = subprocess.run(
                        command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd="/",
                        timeout=timeout, check=False,
                        user=account.uid, group=account.gid, extra_groups=[],
                    )  # fmt: skip
                out.seek(0)
                err.seek(0)
                return subprocess.CompletedProcess(command, proc.returncode, out.read(), err.read())
        except subprocess.TimeoutExpired:
            raise DatabaseUnavailableError(
                f"{Path(args[0]).name} for the embedded PostgreSQL in {self.data_dir} did "
                f"not finish within {timeout:.0f} s; see {self.data_dir / 'log'}, {DSN_HINT}"
            ) from None

    # -- close -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop using the server; with ``stop_on_close``, the last user stops it."""
        if self._users_fd is None:
            return
        if not self._stop_on_close:
            os.close(self._users_fd)
            self._users_fd = None
            return
        with signals_held():  # an interrupted stop would leave the server running
            self._close_and_stop()

    def _close_and_stop(self) -> None:
        """Drop this process's use; the last user (under the start lock) stops the server."""
        users, self._users_fd = self._users_fd, None
        assert users is not None
        try:
            start_lock = os.open(self.root / ".pg-start", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            os.close(users)
            return
        locked = False
        try:
            startlock.take(start_lock, self.data_dir, "stopping")
            locked = True
            os.close(users)
            probe = os.open(self.root / ".pg-users", os.O_RDWR)
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another process still uses the server
            finally:
                os.close(probe)
            self._stop_server()
        except OSError as exc:
            log.warning("could not stop the embedded PostgreSQL in %s: %s", self.data_dir, exc)
        finally:
            if locked:
                startlock.release(start_lock)
            else:
                os.close(start_lock)

    def _stop_server(self, *, appearing_s: float = 0.0) -> None:
        """Stop the server running on the data directory. ``appearing_s``: how long to wait
        for the ``postmaster.pid`` of one that may have just been forked (a ``pg_ctl start``
        killed by a signal can leave a server that has not written it yet)."""
        info = Postmaster.read(self.data_dir)
        deadline = time.monotonic() + appearing_s
        while info is None and time.monotonic() < deadline:
            time.sleep(0.05)
            info = Postmaster.read(self.data_dir)
        if info is None or not serves(info.pid, self.data_dir):
            return
        bin_dir = binaries_dir()
        try:
            result = self._run(
                bin_dir / "pg_ctl", "-D", str(self.data_dir), "-w", "-t", "60", "-m", "fast",
                "stop", timeout=90,
            )  # fmt: skip
            failed = result.returncode != 0
        except DatabaseUnavailableError:
            failed = True
        if failed and serves(info.pid, self.data_dir):
            log.warning("pg_ctl stop failed for %s: ending pid %s", self.data_dir, info.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(info.pid, signal.SIGQUIT)  # immediate shutdown


# -- helpers ---------------------------------------------------------------------------


def stop_signals() -> list[signal.Signals]:
    """The signals that stop a command: SIGTERM, SIGINT, and SIGHUP (its terminal closed)
    unless it is ignored (``nohup``)."""
    signals = [signal.SIGTERM, signal.SIGINT]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signals.append(signal.SIGHUP)
    return signals


@contextlib.contextmanager
def signals_held() -> Iterator[list[int]]:
    """Hold :func:`stop_signals` back (in the main thread, where Python handles them) until
    the block is done, then deliver them to their handlers; yields the list of those held."""
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    signums = stop_signals()
    previous = {signum: signal.getsignal(signum) for signum in signums}

    def hold(signum: int, _frame: object) -> None:
        held.append(signum)

    for each in signums:
        signal.signal(each, hold)
    try:
        yield held
    finally:
        for each, handler in previous.items():
            signal.signal(each, signal.SIG_DFL if handler is None else handler)
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)


#: What PostgreSQL cannot take in the data directory's path: pg_ctl runs the server through
#: ``/bin/sh -c`` with the path in double quotes; the server and libpq read the socket
#: directory as a comma-separated list; a newline would split ``postmaster.pid``'s lines.
_UNUSABLE_IN_PATH = ('"', "$", "`", "\\", ",", "\n")


def _check_path(pgdata: Path) -> None:
    """Refuse, before anything is made there, a data directory the server cannot run in."""
    hint = f"use another --data-dir (or MQSTORE_DATA_DIR), {DSN_HINT}"
    special = next((c for c in _UNUSABLE_IN_PATH if c in str(pgdata)), None)
    if special is not None:
        raise DatabaseUnavailableError(
            f"data directory path {pgdata} contains {special!r}, which PostgreSQL cannot "
            f"take in the path of its data and socket; {hint}"
        )
    # A Unix socket's path (pgdata/.s.PGSQL.PORT) is limited to 107 bytes.
    if len(os.fsencode(pgdata)) > 90:
        raise DatabaseUnavailableError(
            f"data directory path {pgdata} is too long for PostgreSQL's socket (over 90 "
            f"bytes); {hint}"
        )


def binaries_dir() -> Path:
    """pgserver's PostgreSQL binaries (without importing pgserver, which has side effects)."""
    spec = importlib.util.find_spec("pgserver")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / "pginstall" / "bin"
        if (candidate / "pg_ctl").exists():
            return candidate
    raise DatabaseUnavailableError(
        "the embedded PostgreSQL needs the pgserver package, which is not installed; "
        f"pip install pgserver, {DSN_HINT}"
    )


def _terminate_users_of(path: Path) -> None:
    """End processes (an orphaned initdb or postgres) whose command line names ``path``."""
    target = str(path).encode()
    proc = Path("/proc")
    if not proc.is_dir():
        return
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if target in argv:
            pids.append(int(entry.name))
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:  # wait until they are gone (they may be our children: reap them)
        for _ in range(100):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                pass
            time.sleep(0.02)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
