"""The embedded PostgreSQL on data directories a user may pick: a cluster moved to another
disk and reached through a symlinked ``pg``, and paths PostgreSQL's Unix socket or
``pg_ctl`` cannot take (a comma, a shell character, a long non-ASCII name).

Real ``mqstore`` processes, as in test_embedded.py (whose helpers these reuse).
"""

from __future__ import annotations

import signal

import pytest

from tests.integration.test_embedded import (
    Workdir,
    _assert_no_server_left,
    _error_lines,
    _free_port,
    _send_receive,
    work,
)

__all__ = ["work"]  # the fixture, imported for these tests


def test_a_cluster_reached_through_a_symlinked_pg_is_shared_and_stopped_by_its_last_user(
    work: Workdir,
) -> None:
    """``mqstore-data/pg`` moved to a bigger disk and symlinked back: a second command
    uses the server ``serve`` runs (it does not take its lock files for a dead server's),
    and the last user to exit stops it."""
    assert work.run("db", "upgrade").returncode == 0
    elsewhere = work.path / "bigger-disk" / "pg"
    elsewhere.parent.mkdir()
    work.pgdata.rename(elsewhere)
    work.pgdata.symlink_to(elsewhere)

    port = _free_port()
    serving = work.serve(port, "serve.log")
    work.wait_serving(serving, "serve.log")
    stats = work.run("stats", "--json")
    assert stats.returncode == 0, stats.stderr
    assert (elsewhere / "postmaster.pid").exists(), "the running server's lock file is gone"
    assert _send_receive(port, "on the other disk") == "on the other disk"

    serving.send_signal(signal.SIGTERM)
    assert serving.wait(60) == 0, (work.path / "serve.log").read_text()
    _assert_no_server_left(work)


def test_a_data_directory_renamed_while_a_killed_commands_server_runs_is_used_at_its_new_path(
    work: Workdir,
) -> None:
    """``serve`` killed with SIGKILL leaves its server running; the project directory is then
    renamed. The next command reaches that server at the new path (its ``postmaster.pid``
    still names the old one) and, as its last user, stops it."""
    old, new = work.path / "project" / "mqstore-data", work.path / "renamed" / "mqstore-data"
    port = _free_port()
    killed = work.serve(port, "serve.log", "--data-dir", str(old))
    work.wait_serving(killed, "serve.log")
    killed.kill()  # SIGKILL of mqstore only: its PostgreSQL goes on
    killed.wait(10)
    assert work.postgres_pids()
    old.parent.rename(new.parent)

    stats = work.run("stats", "--json", "--data-dir", str(new))
    assert stats.returncode == 0, stats.stderr
    _assert_no_server_left(work)


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ('say "hi"', "contains '\"'"),
        ("cost$HOME", "contains '$'"),
        ("queues,archive", "contains ','"),
        ("ü" * 60, "is too long"),  # 60 characters, 120 bytes
    ],
    ids=["double quote", "dollar", "comma", "long non-ASCII name"],
)
def test_a_data_directory_path_the_server_cannot_use_is_refused_before_anything_is_made(
    work: Workdir, name: str, said: str
) -> None:
    """Refused in one line saying why, before a cluster is initialised that could never
    be started or reached (pg_ctl passes the path through a shell in double quotes, the
    server and libpq split a socket directory at commas, a Unix socket's path is limited
    to about 100 bytes)."""
    data_dir = work.path / name
    result = work.run("db", "upgrade", "--data-dir", str(data_dir))
    assert result.returncode == 2, result.stderr
    lines = _error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert said in lines[0] and "--data-dir" in lines[0], lines[0]
    assert not (data_dir / "pg").exists()
    assert not work.postgres_pids()


def test_an_empty_pg_is_refused_not_made_into_a_new_store(work: Workdir) -> None:
    """An empty ``pg`` is what a disk that should be mounted there leaves when it is not:
    a new cluster in it would start the broker on an empty store, hiding the real one."""
    work.pgdata.mkdir(parents=True)
    result = work.run("db", "upgrade")
    assert result.returncode == 2, result.stderr
    lines = _error_lines(result.stderr)
    assert len(lines) == 1 and "is an empty directory" in lines[0], result.stderr
    assert "mount it" in lines[0] and "remove the directory" in lines[0], lines[0]
    assert list(work.pgdata.iterdir()) == []
    assert not list(work.pgdata.parent.glob("pg.init-*"))
    assert not work.postgres_pids()


def test_a_pg_symlink_to_nothing_is_refused_and_left_alone(work: Workdir) -> None:
    """A ``pg`` linked to a disk that is not mounted: one line naming the link's target."""
    gone = work.path / "unmounted-disk" / "pg"
    work.pgdata.parent.mkdir(parents=True, exist_ok=True)
    work.pgdata.symlink_to(gone)
    result = work.run("db", "upgrade")
    assert result.returncode == 2, result.stderr
    lines = _error_lines(result.stderr)
    assert len(lines) == 1 and f"is a symlink to {gone}" in lines[0], result.stderr
    assert work.pgdata.is_symlink() and not gone.exists()
    assert not list(work.pgdata.parent.glob("pg.init-*"))
    assert not work.postgres_pids()
