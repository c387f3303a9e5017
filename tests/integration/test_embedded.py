"""The embedded PostgreSQL (no DSN: ``./mqstore-data``), as a user runs it: real ``mqstore``
processes, killed with SIGKILL where a crash is involved.

Every test runs ``python -m mqstore`` in a fresh directory under /tmp with this checkout on
PYTHONPATH, so a checkout of an older commit tests its own code.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp

from mqstore.embedded import store_exists
from tests.conftest import REPO, small_tmpfs

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NOBODY = 65534


#: ``python -m mqstore`` with SIGHUP at its default, as a terminal's session leader has it,
#: even when the tests run under ``nohup``: an ignored signal stays ignored across exec, and
#: mqstore leaves an ignored SIGHUP alone.
MQSTORE_HANGUP_DEFAULT = [
    sys.executable, "-c",
    "import runpy, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
    "sys.argv[0] = 'mqstore'; runpy.run_module('mqstore', run_name='__main__')",
]  # fmt: skip


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MQSTORE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


class Workdir:
    """A fresh directory to run ``mqstore`` in; every process and server it started is
    ended afterwards."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="mqe-", dir="/tmp"))
        self.path.chmod(0o755)  # as /tmp/NAME usually is (the root test makes its own 0700)
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def pgdata(self) -> Path:
        return self.path / "mqstore-data" / "pg"

    def run(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mqstore", *args],
            cwd=cwd or self.path, env=_env(), capture_output=True, text=True, timeout=300,
            check=False,
        )  # fmt: skip

    def serve(self, port: int, log: str, *args: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [*MQSTORE_HANGUP_DEFAULT, "serve", "--stomp", f"127.0.0.1:{port}",
             "--log-level", "WARNING", *args],
            cwd=self.path, env=_env(), stdout=(self.path / log).open("wb"),
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.procs.append(proc)
        return proc

    def wait_serving(self, proc: subprocess.Popen[bytes], log: str) -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            text = (self.path / log).read_text(errors="replace")
            if "serving STOMP" in text:
                return
            if proc.poll() is not None:
                pytest.fail(f"mqstore serve exited {proc.returncode}:\n{text}")
            time.sleep(0.05)
        pytest.fail(f"mqstore serve did not come up:\n{(self.path / log).read_text()}")

    def postgres_pids(self) -> list[int]:
        """postgres processes working in this directory (a postmaster's cwd is its data)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                comm = (entry / "comm").read_text().strip()
                cwd = os.readlink(entry / "cwd")
                if comm == "postgres" and cwd.startswith(str(self.path)):
                    pids.append(int(entry.name))
        return pids

    def kill_postgres(self) -> None:
        """SIGKILL the embedded server's processes (a test whose server is in a tmpfs)."""
        for pid in self.postgres_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        for pid in self.postgres_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + 10
        while self.postgres_pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(self.path, ignore_errors=True)


@pytest.fixture
def work() -> Iterator[Workdir]:
    workdir = Workdir()
    try:
        yield workdir
    finally:
        workdir.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _send_receive(port: int, body: str) -> str:
    """Send ``body`` to a queue and receive it back over STOMP."""
    received: list[str] = []

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame: stomp.utils.Frame) -> None:
            received.append(frame.body)

    conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0))
    conn.set_listener("l", Listener())
    conn.connect(wait=True)
    try:
        conn.send("/queue/embedded", body, headers={"persistent": "true"})
        conn.subscribe("/queue/embedded", id="1", ack="auto")
        deadline = time.monotonic() + 15
        while not received and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        conn.disconnect()
    assert received, "no message came back"
    return received[0]


def _error_lines(stderr: str) -> list[str]:
    """The ``error:`` lines, after checking nothing else but a log line or two came."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) <= 3 and "Traceback" not in stderr, stderr
    return [line for line in lines if line.startswith("error:")]


# -- 1. root: nothing outside the data opened up, no login user ----------------------------


def _acl_supported(directory: Path) -> bool:
    probe = Path(tempfile.mkdtemp(dir=directory))
    try:
        raw = b"\x02\0\0\0" + b"".join(
            tag.to_bytes(2, "little") + perm.to_bytes(2, "little") + b"\xff\xff\xff\xff"
            for tag, perm in ((1, 7), (4, 0), (0x20, 0))
        )
        os.setxattr(probe, "system.posix_acl_access", raw)
        return True
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.ENOTSUP):
            return False
        raise
    finally:
        probe.rmdir()


def _as_user(uid: int, gid: int, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(command), user=uid, group=gid, extra_groups=[], cwd="/", capture_output=True,
        text=True, timeout=30, check=False,
    )  # fmt: skip


@pytest.mark.skipif(not IS_ROOT, reason="the root case needs root")
def test_as_root_no_parent_directory_is_opened_and_no_login_user_is_made(work: Workdir) -> None:
    acls = _acl_supported(work.path)
    secret = work.path / "secret-home"
    app = secret / "app"
    app.mkdir(parents=True)
    secret.chmod(0o700)
    (secret / "credentials").write_text("token\n")
    (secret / "credentials").chmod(0o644)
    binaries = Path(__import__("pgserver").__file__).parent / "pginstall" / "bin"
    watched = [*app.parents, app, *binaries.parents]
    before = {p: stat.S_IMODE(p.stat().st_mode) for p in watched}

    result = work.run("db", "upgrade", cwd=app)
    if acls:
        assert result.returncode == 0, result.stderr
    else:  # no ACL to give the server's user traverse alone: refused, saying what to do
        assert result.returncode == 2 and "setfacl -m" in result.stderr, result.stderr

    for path, mode in before.items():
        now = stat.S_IMODE(path.stat().st_mode)
        # others gain nothing, the group gains no read (x may show an ACL mask, see below)
        assert now & 0o047 == mode & 0o047, f"{path}: {mode:o} became {now:o}"
    # Neither another user nor the directory's group can read or traverse secret-home.
    for gid in (NOBODY, secret.stat().st_gid):
        assert _as_user(NOBODY, gid, "cat", str(secret / "credentials")).returncode != 0
        assert _as_user(NOBODY, gid, "ls", str(secret)).returncode != 0
    if not acls:
        return
    # The server runs as a system account without a login shell.
    owner = pwd.getpwuid((app / "mqstore-data" / "pg").stat().st_uid)
    assert owner.pw_uid != 0
    assert owner.pw_uid < 1000, f"{owner.pw_name} is not a system account"
    assert Path(owner.pw_shell).name in ("nologin", "false"), owner
    # ... which can use the store.
    assert work.run("lock", "status", cwd=app).returncode == 0


# -- 2. an interrupted or failed first start ----------------------------------------------


@pytest.mark.parametrize("kill_at", ["PG_VERSION", "global/pg_control"])
def test_first_start_killed_during_initdb_starts_next_time(work: Workdir, kill_at: str) -> None:
    port = _free_port()
    first = work.serve(port, "first.log")
    deadline = time.monotonic() + 60
    data = work.path / "mqstore-data"
    while not any(data.glob(f"pg*/{kill_at}")):
        assert time.monotonic() < deadline and first.poll() is None, "initdb never got there"
        time.sleep(0.002)
    os.killpg(first.pid, signal.SIGKILL)  # as systemd or docker kill the whole group
    first.wait(10)

    second = work.serve(port, "second.log")
    work.wait_serving(second, "second.log")
    assert _send_receive(port, "after a killed initdb") == "after a killed initdb"
    second.send_signal(signal.SIGTERM)
    assert second.wait(30) == 0
    assert not work.postgres_pids()
    assert not list(data.glob("pg.init-*")), "the interrupted initdb's files are left"


def test_half_made_cluster_of_an_older_version_is_made_again(work: Workdir) -> None:
    """What an older mqstore left when killed in initdb: PG_VERSION, the bootstrap backend's
    7-line postmaster.pid, no global/pg_control."""
    work.pgdata.mkdir(parents=True, mode=0o700)
    (work.pgdata / "PG_VERSION").write_text("16\n")
    (work.pgdata / "base").mkdir()
    (work.pgdata / "postmaster.pid").write_text(
        f"-999999\n{work.pgdata}\n1795409846\n5432\n\n\n  2188357     65599\n"
    )
    result = work.run("db", "upgrade")
    assert result.returncode == 0, result.stderr
    assert (work.pgdata / "global" / "pg_control").is_file()
    assert work.run("stats", "--json").returncode == 0


@pytest.mark.skipif(not IS_ROOT, reason="mounting a small file system needs root")
def test_full_disk_at_first_start_is_one_line_naming_the_cause(work: Workdir) -> None:
    with small_tmpfs(work.path / "small", "20m") as small, contextlib.ExitStack() as cleanup:
        cleanup.callback(work.kill_postgres)
        result = subprocess.run(
            [sys.executable, "-m", "mqstore", "serve", "--stomp", f"127.0.0.1:{_free_port()}",
             "--log-level", "WARNING"],
            cwd=small, env=_env(), capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert result.returncode == 2
        lines = _error_lines(result.stderr)
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("error:") and "FATAL" in lines[0]
        assert "disk space" in lines[0] or "No space left" in lines[0], lines[0]
        assert "free disk space" in lines[0]
        # nothing half-made is left to trip the next start
        assert not [p.name for p in (small / "mqstore-data").glob("pg*")]


def test_start_failure_reports_the_servers_fatal_line(work: Workdir) -> None:
    assert work.run("db", "upgrade").returncode == 0
    with (work.pgdata / "postgresql.conf").open("a") as conf:
        conf.write("shared_buffers = 'plenty'\n")
    result = work.run("db", "status")
    assert result.returncode == 2
    lines = _error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert "FATAL: configuration file" in lines[0] and "contains errors" in lines[0], lines[0]
    assert str(work.pgdata / "log") in lines[0]  # where to read more


# -- 3. the last user stops the server, even after a SIGKILL ------------------------------


def test_sigkilled_serve_does_not_keep_the_server_running_for_ever(work: Workdir) -> None:
    port = _free_port()
    first = work.serve(port, "first.log")
    work.wait_serving(first, "first.log")
    assert _send_receive(port, "one") == "one"
    first.kill()  # SIGKILL of mqstore only: its PostgreSQL goes on
    first.wait(10)
    assert work.postgres_pids()

    second = work.serve(port, "second.log")
    work.wait_serving(second, "second.log")
    # another user comes and goes: the server stays up for the broker
    stats = work.run("stats", "--json")
    assert stats.returncode == 0, stats.stderr
    assert _send_receive(port, "two") == "two"

    second.send_signal(signal.SIGTERM)
    assert second.wait(30) == 0
    deadline = time.monotonic() + 15
    while work.postgres_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not work.postgres_pids(), "the embedded PostgreSQL was left running"


def test_a_crashed_servers_pid_taken_by_another_process_does_not_block_the_start(
    work: Workdir,
) -> None:
    """After a crash (a power cut, a killed container) the server's lock files stay behind;
    after a reboot their pid may be another process of the server's user, which PostgreSQL
    takes for a server still running on the data."""
    port = _free_port()
    first = work.serve(port, "first.log")
    work.wait_serving(first, "first.log")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(10)
    for pid in work.postgres_pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 15
    while work.postgres_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not work.postgres_pids()
    owner = work.pgdata.stat()
    as_owner: dict[str, Any] = (
        {"user": owner.st_uid, "group": owner.st_gid, "extra_groups": []} if IS_ROOT else {}
    )
    other = subprocess.Popen(["sleep", "300"], **as_owner)  # the pid, reused
    try:
        locks = [work.pgdata / "postmaster.pid", *work.pgdata.glob(".s.PGSQL.*.lock")]
        assert locks[0].exists()
        for lock in locks:
            rest = lock.read_text().splitlines()[1:]
            lock.write_text("\n".join([str(other.pid), *rest]) + "\n")
        result = work.run("stats", "--json")
        assert result.returncode == 0, result.stderr
        assert other.poll() is None  # left alone
    finally:
        other.kill()
        other.wait(10)


def _mqstore_popen(work: Workdir, *args: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [*MQSTORE_HANGUP_DEFAULT, *args], cwd=work.path, env=_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    work.procs.append(proc)
    return proc


def _wait_for_server_start(work: Workdir, proc: subprocess.Popen[bytes]) -> None:
    """Until ``pg_ctl start`` runs on the work directory's cluster (or a server does)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError, ValueError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if b"start" in argv and str(work.pgdata).encode() in argv:
                    return
        if work.postgres_pids():
            return
    pytest.fail(f"no embedded server was started (mqstore exited {proc.poll()})")


def _assert_no_server_left(work: Workdir) -> None:
    deadline = time.monotonic() + 30
    while work.postgres_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not work.postgres_pids(), "the embedded PostgreSQL was left running"


@pytest.mark.parametrize(
    ("how", "exit_code"),
    [
        ("SIGTERM to mqstore", 128 + signal.SIGTERM),
        ("Ctrl-C at the terminal", 130),
        ("the terminal closed", 128 + signal.SIGHUP),
    ],
)
def test_a_command_stopped_while_the_server_starts_leaves_no_server_running(
    work: Workdir, how: str, exit_code: int
) -> None:
    """``kill PID`` (a supervisor, ``timeout``) or Ctrl-C (SIGINT to the whole foreground
    group, pg_ctl too) while the embedded server is being started: no process uses that
    server any more, so it must not be left running."""
    assert work.run("db", "upgrade").returncode == 0  # the cluster exists; the server stopped
    assert not work.postgres_pids()
    proc = _mqstore_popen(work, "stats")
    _wait_for_server_start(work, proc)
    if how == "SIGTERM to mqstore":
        proc.send_signal(signal.SIGTERM)
    elif how == "Ctrl-C at the terminal":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.killpg(proc.pid, signal.SIGHUP)
    _, stderr = proc.communicate(timeout=120)
    _assert_no_server_left(work)
    assert proc.returncode == exit_code, stderr.decode()
    assert b"Traceback" not in stderr, stderr.decode()
    assert work.run("stats", "--json").returncode == 0  # and the store starts again


def test_serve_stops_gracefully_when_its_terminal_closes(work: Workdir) -> None:
    """SIGHUP (the terminal of a foreground ``mqstore serve`` closed) stops it as SIGTERM
    does: what it acknowledged is kept and its embedded server does not run on alone."""
    port = _free_port()
    proc = work.serve(port, "serve.log")
    work.wait_serving(proc, "serve.log")
    assert _send_receive(port, "kept") == "kept"
    os.killpg(proc.pid, signal.SIGHUP)
    assert proc.wait(60) == 0, (work.path / "serve.log").read_text()
    _assert_no_server_left(work)


def test_two_serves_started_together_on_a_new_data_directory_one_is_refused(
    work: Workdir,
) -> None:
    """``mqstore serve`` twice at once where no data directory is yet: exactly one
    initialises the store and serves; the other is refused at once, naming it, and leaves
    the one serving its server. (test_serve.py repeats the race, with a DSN.)"""
    data_dir = work.path / "data"
    logs = [f"serve-{n}.log" for n in range(2)]
    procs = [work.serve(0, log, "--data-dir", str(data_dir)) for log in logs]
    deadline = time.monotonic() + 120
    while all(proc.poll() is None for proc in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    [refused] = [proc for proc in procs if proc.poll() is not None]
    [serving] = [proc for proc in procs if proc is not refused]
    output = (work.path / logs[procs.index(refused)]).read_text()
    assert refused.returncode == 2, output
    lines = _error_lines(output)
    assert len(lines) == 1, output
    assert f"is locked by another process (pid {serving.pid})" in lines[0], lines[0]
    assert "another `mqstore serve`" in lines[0], lines[0]
    work.wait_serving(serving, logs[procs.index(serving)])
    serving.send_signal(signal.SIGTERM)
    assert serving.wait(60) == 0
    _assert_no_server_left(work)
    assert store_exists(data_dir)


def test_serve_with_a_journal_directory_it_cannot_use_creates_no_store(work: Workdir) -> None:
    """An unusable ``--journal-dir`` is refused in one line before an embedded store is
    initialised, started and locked for nothing."""
    (work.path / "a-file").write_text("")
    journal_dir = work.path / "a-file" / "journal"
    result = work.run("serve", "--journal-dir", str(journal_dir), "--stomp", "127.0.0.1:0")
    assert result.returncode == 2, result.stderr
    lines = _error_lines(result.stderr)
    assert len(lines) == 1 and str(journal_dir) in lines[0], result.stderr
    assert "--journal-dir" in lines[0], lines[0]
    assert not (work.path / "mqstore-data").exists()
    assert not work.postgres_pids()


# -- 4. read-only commands never create a store -------------------------------------------


def test_serve_with_settings_it_refuses_creates_no_store(work: Workdir) -> None:
    """A journaled broker refuses the row lock: it says so before it initialises and starts
    an embedded server for nothing."""
    result = work.run("serve", "--lock", "row", "--stomp", "127.0.0.1:0")
    assert result.returncode == 2
    lines = _error_lines(result.stderr)
    assert len(lines) == 1 and "the row lock pairs this broker" in lines[0], result.stderr
    assert not (work.path / "mqstore-data").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["stats"],
        ["browse", "Q"],
        ["lock", "status"],
        ["db", "status"],
        ["db", "check"],
        ["db", "downgrade", "base", "--yes"],
    ],
)
def test_read_only_command_without_dsn_or_store_creates_nothing(
    work: Workdir, command: list[str]
) -> None:
    result = work.run(*command)
    assert result.returncode == 2
    lines = _error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert "MQSTORE_DSN" in lines[0] and "./mqstore-data" in lines[0], lines[0]
    assert "db upgrade" not in lines[0]
    assert not (work.path / "mqstore-data").exists()
