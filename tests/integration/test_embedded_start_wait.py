"""The embedded PostgreSQL when a command has to wait: for another ``mqstore`` process that
holds the start lock, and for a server that is still starting (recovering after a crash).

Real ``mqstore`` processes, as in test_embedded.py (whose helpers these reuse). A start that
recovers for as long as a test wants is a real one: the cluster is put into archive recovery
whose ``restore_command`` waits until the test creates a file, and with ``hot_standby`` off
the server accepts no connection until that recovery ends, as after a crash.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mqstore.embedded.server import binaries_dir
from tests.integration.test_embedded import (
    IS_ROOT,
    Workdir,
    _assert_no_server_left,
    _env,
    _error_lines,
    _wait_for_server_start,
    work,
)

__all__ = ["work"]  # the fixture, imported for these tests

#: ``python -m mqstore`` whose wait for the server to start is 2 s instead of 60 s.
MQSTORE_SHORT_START_TIMEOUT = [
    sys.executable, "-c",
    "import runpy, sys; import mqstore.embedded.server as s; s._START_TIMEOUT_S = 2; "
    "sys.argv[0] = 'mqstore'; runpy.run_module('mqstore', run_name='__main__')",
]  # fmt: skip


class Command:
    """An ``mqstore`` command running in the work directory; its stderr is read as it
    comes."""

    def __init__(self, work: Workdir, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mqstore", *args], cwd=work.path, env=_env(),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        work.procs.append(self.proc)  # type: ignore[arg-type]
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def wait_for_line(self, text: str) -> str:
        """The first stderr line containing ``text``, once it has come."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = [line for line in self.stderr if text in line]
            if found:
                return found[0]
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        pytest.fail(f"no line with {text!r} (exit {self.proc.poll()}):\n{''.join(self.stderr)}")

    def finish(self) -> tuple[int, str]:
        """Its exit code and standard output, once it has exited."""
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()
        code = self.proc.wait(120)
        self._reader.join(10)
        return code, out


def _recovering_until(work: Workdir) -> Path:
    """Make the cluster's next start recover, accepting no connection, until the returned
    file exists."""
    gate = work.path / "recovery-may-end"
    owner = work.pgdata.stat()
    recovery_signal = work.pgdata / "recovery.signal"
    recovery_signal.touch()
    os.chown(recovery_signal, owner.st_uid, owner.st_gid)
    with (work.pgdata / "postgresql.conf").open("a") as conf:
        conf.write("hot_standby = off\n")
        conf.write(f"restore_command = 'while [ ! -e {gate} ]; do sleep 0.1; done; false'\n")
    return gate


def test_a_command_waiting_for_another_that_starts_the_server_says_so_and_goes_on(
    work: Workdir,
) -> None:
    """A second command while the first is still starting the server (its initdb, or a
    start that recovers) says once whom it waits for, then runs on the started server."""
    assert work.run("db", "upgrade").returncode == 0
    gate = _recovering_until(work)
    first = Command(work, "stats", "--json")
    _wait_for_server_start(work, first.proc)  # type: ignore[arg-type]
    second = Command(work, "stats", "--json")
    line = second.wait_for_line("waiting for another mqstore process")
    assert f"(pid {first.proc.pid}), which is starting" in line, line
    assert str(work.pgdata) in line, line
    assert second.proc.poll() is None  # it waits, and goes on once the server is up
    gate.touch()
    for command in (first, second):
        code, out = command.finish()
        assert code == 0, "".join(command.stderr)
        assert "destinations" in json.loads(out)
    assert sum("waiting for another" in line for line in second.stderr) == 1
    _assert_no_server_left(work)


def _still_starting_error(work: Workdir) -> str:
    """Run ``stats`` with a short start timeout; it must fail (exit 2): its error line."""
    result = subprocess.run(
        [*MQSTORE_SHORT_START_TIMEOUT, "stats", "--json"], cwd=work.path, env=_env(),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    [line] = [line for line in _error_lines(result.stderr) if "error:" in line]
    return line


def test_a_start_that_outlasts_its_timeout_is_reported_as_still_starting_and_then_used(
    work: Workdir,
) -> None:
    """``pg_ctl start`` gives up waiting while the server goes on recovering: the command
    says the server is still starting, where its log is and what to do, and leaves it to
    finish; a later command waits until it accepts connections and then uses it."""
    assert work.run("db", "upgrade").returncode == 0
    gate = _recovering_until(work)
    for _ in range(2):  # the command that starts it, then one that finds it still starting
        line = _still_starting_error(work)
        assert "is still starting" in line and "leave it running" in line, line
        assert str(work.pgdata / "log") in line, line
        assert work.postgres_pids(), "the starting server was not left to finish"

    later = Command(work, "stats", "--json")
    line = later.wait_for_line("to finish starting")
    assert str(work.pgdata) in line, line
    gate.touch()
    code, out = later.finish()
    assert code == 0, "".join(later.stderr)
    assert "destinations" in json.loads(out)
    _assert_no_server_left(work)  # the later command was its last user


def test_a_server_that_pg_ctl_takes_for_started_before_it_accepts_connections_is_waited_for(
    work: Workdir,
) -> None:
    """A recovery with ``hot_standby`` off (from an archive once redo begins, or a standby):
    ``pg_ctl start`` returns, while the server accepts no connection until recovery ends.
    The command treats it as still starting, as above; a later command uses it once it
    has ended (here, once promoted)."""
    assert work.run("db", "upgrade").returncode == 0
    owner = work.pgdata.stat()
    standby_signal = work.pgdata / "standby.signal"  # recovery that ends when promoted
    standby_signal.touch()
    os.chown(standby_signal, owner.st_uid, owner.st_gid)
    with (work.pgdata / "postgresql.conf").open("a") as conf:
        conf.write("hot_standby = off\n")
    line = _still_starting_error(work)
    assert "is still starting" in line and str(work.pgdata / "log") in line, line
    assert work.postgres_pids(), "the starting server was not left to finish"

    later = Command(work, "stats", "--json")
    later.wait_for_line("to finish starting")
    as_owner: dict[str, Any] = (
        {"user": owner.st_uid, "group": owner.st_gid, "extra_groups": []} if IS_ROOT else {}
    )
    promote = subprocess.run(
        [str(binaries_dir() / "pg_ctl"), "promote", "-D", str(work.pgdata)], cwd="/",
        capture_output=True, text=True, timeout=120, check=False, **as_owner,
    )  # fmt: skip
    assert promote.returncode == 0, promote.stderr
    code, out = later.finish()
    assert code == 0, "".join(later.stderr)
    assert "destinations" in json.loads(out)
    _assert_no_server_left(work)
