"""Mistakes a user makes on the command line: one line on stderr, exit code 2, no harm."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from mqstore import migrate
from tests.conftest import Databases, as_role, scratch_role
from tests.integration.test_cli import mqstore


def _one_line_error(result: subprocess.CompletedProcess[str], words: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["stats"], "no mqstore tables"),
        (["lock", "status"], "no mqstore tables"),
        (["browse", "orders"], "no mqstore tables"),
        (["db", "upgrade", "--revision", "nonsense"], "cannot migrate to 'nonsense'"),
        (["db", "downgrade", "base"], "pass --yes"),
    ],
)
def test_commands_on_a_database_without_tables(empty_dsn: str, args: list[str], words: str) -> None:
    _one_line_error(mqstore(*args, "--dsn", empty_dsn), words)


@pytest.fixture
def no_rights_dsn(databases: Databases, dsn: str) -> Iterator[str]:
    """``dsn`` with its sessions run as a role granted nothing on the tables."""
    with scratch_role(databases, dsn, "cli") as name:
        yield as_role(dsn, name)


@pytest.mark.parametrize(
    "args",
    [
        ["stats"],
        ["lock", "status"],
        ["browse", "orders"],
        ["db", "status"],
        ["journal", "forget", "j1", "--yes"],
        ["history", "trim", "--older-than-days", "1"],
    ],
)
def test_a_role_without_rights_on_the_tables_is_told_the_grant(
    no_rights_dsn: str, args: list[str]
) -> None:
    result = mqstore(*args, "--dsn", no_rights_dsn)
    _one_line_error(result, "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA")


@pytest.mark.parametrize(
    "args", [["history", "trim", "--older-than-days", "1"], ["db", "adopt"]], ids=str
)
def test_commands_on_an_embedded_store_that_is_not_there_make_none(
    tmp_path: Path, args: list[str]
) -> None:
    """Without a DSN, only `serve` and `db upgrade` create the embedded store: elsewhere a
    wrong directory is named, not a new, empty store made there and blamed for its tables."""
    data_dir = tmp_path / "mqstore-data"
    env = {k: v for k, v in os.environ.items() if k != "MQSTORE_DSN"}
    result = mqstore(*args, "--data-dir", str(data_dir), env=env)
    _one_line_error(result, f"no embedded store in {data_dir}")
    assert not data_dir.exists()


def test_a_bad_environment_variable_is_named_and_an_empty_one_is_unset(
    tmp_path: Path, dsn: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MQSTORE_")}
    bad = mqstore("stats", "--dsn", dsn, env={**env, "MQSTORE_LEASE_MS": "ten"})
    _one_line_error(bad, "MQSTORE_LEASE_MS: Input should be a valid integer")
    flag = mqstore("stats", "--dsn", dsn, "--table-prefix", "a b", env=env)
    # the flag's, not the environment's
    _one_line_error(flag, "table_prefix: table prefix must start with a letter")
    assert "MQSTORE_" not in flag.stderr
    data_dir = tmp_path / "mqstore-data"
    empty = mqstore("stats", "--data-dir", str(data_dir), env={**env, "MQSTORE_DSN": ""})
    _one_line_error(empty, f"no embedded store in {data_dir}")  # as if MQSTORE_DSN were unset


def test_a_database_newer_than_this_mqstore_is_named(empty_engine: Engine, empty_dsn: str) -> None:
    migrate.upgrade(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(sa.text("UPDATE mqstore_version SET version_num = '0099'"))
    _one_line_error(mqstore("db", "upgrade", "--dsn", empty_dsn), "newer than this mqstore")


def test_journal_forget_on_an_older_schema_says_to_upgrade(
    empty_engine: Engine, empty_dsn: str
) -> None:
    migrate.upgrade(empty_engine, revision="0002")  # the journal table, without stopped_at
    result = mqstore("journal", "forget", "j1", "--yes", "--dsn", empty_dsn)
    _one_line_error(result, "run `mqstore db upgrade`")
    assert "0002" in result.stderr


def test_downgrade_refuses_while_a_broker_holds_the_lease(engine: Engine, dsn: str) -> None:
    held_until = int(time.time() * 1000) + 60_000
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE activemq_lock SET broker_name = 'live-one', time = :t"),
            {"t": held_until},
        )
        conn.execute(
            sa.text(
                "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, "
                "msg, priority) VALUES (1, 'queue://kept', 'p', 1, 0, 'x', 0)"
            )
        )
    _one_line_error(mqstore("db", "downgrade", "base", "--yes", "--dsn", dsn), "live-one")
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM activemq_msgs")).scalar() == 1
    forced = mqstore("db", "downgrade", "base", "--yes", "--force", "--dsn", dsn)
    assert forced.returncode == 0, forced.stderr
    with engine.connect() as conn:
        assert not sa.inspect(conn).has_table("activemq_msgs")


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--stomp", "127.0.0.1:99999"], {}, "port from 0 to 65535"),
        (["--log-level", "bogus"], {}, "--log-level must be one of"),
        ([], {"MQSTORE_JOURNAL_SYNC": "bogus"}, "invalid journal sync policy"),
        ([], {"MQSTORE_METRICS_PORT": "-1"}, "MQSTORE_METRICS_PORT: Input should be greater"),
        # a lease past BIGINT's epoch milliseconds, a checkpoint timer past any clock
        ([], {"MQSTORE_LEASE_MS": "1" + "0" * 20}, "MQSTORE_LEASE_MS: Input should be less"),
        ([], {"MQSTORE_CHECKPOINT_INTERVAL_MS": "9" * 19}, "MQSTORE_CHECKPOINT_INTERVAL_MS"),
        (["--users-file", "/nonexistent/users.properties"], {}, "cannot read the users file"),
    ],
)
def test_serve_refuses_bad_settings_before_it_starts(
    dsn: str, tmp_path: Path, args: list[str], env: dict[str, str], words: str
) -> None:
    result = mqstore(
        "serve", "--dsn", dsn, "--data-dir", str(tmp_path), "--lock", "none", *args,
        env={**os.environ, **env},
    )  # fmt: skip
    _one_line_error(result, words)


def _serve_beside_a_listener(dsn: str, tmp_path: Path, *port_args: str) -> tuple[int, Any]:
    """``mqstore serve`` with ``{port}`` in ``port_args`` taken by another listener."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = mqstore(
            "serve", "--dsn", dsn, "--data-dir", str(tmp_path), "--lock", "none",
            "--no-journal", *(a.format(port=port) for a in port_args),
        )  # fmt: skip
    return port, result


def test_serve_on_a_port_in_use_says_so(dsn: str, tmp_path: Path) -> None:
    _, result = _serve_beside_a_listener(dsn, tmp_path, "--stomp", "127.0.0.1:{port}")
    _one_line_error(result, "address already in use")


def test_serve_on_a_metrics_port_in_use_names_the_port_and_the_option(
    dsn: str, tmp_path: Path
) -> None:
    port, result = _serve_beside_a_listener(
        dsn, tmp_path, "--stomp", "127.0.0.1:0", "--metrics-port", "{port}"
    )
    _one_line_error(result, f"cannot serve /metrics on 127.0.0.1:{port}")
    assert "--metrics-port" in result.stderr


def test_a_users_file_without_logins_is_refused(dsn: str, tmp_path: Path) -> None:
    users = tmp_path / "users.properties"
    users.write_text("# nobody yet\n")
    result = mqstore("serve", "--dsn", dsn, "--data-dir", str(tmp_path), "--users-file", str(users))
    _one_line_error(result, "holds no login")
    users.write_text("app secret\n")
    result = mqstore("serve", "--dsn", dsn, "--data-dir", str(tmp_path), "--users-file", str(users))
    _one_line_error(result, ":1: expected login=passcode")


def test_browse_takes_stomp_names_and_refuses_other_schemes(engine: Engine, dsn: str) -> None:
    from mqstore.openwire import encode, text_message

    frame = encode(
        text_message("hello", destination="queue://orders", producer_id="ID:p:1:1", sequence=1)
    )
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, "
                "msg, priority) VALUES (1, 'queue://orders', 'ID:p:1:1:1', 1, 0, :m, 0)"
            ),
            {"m": frame},
        )
    for name in ("orders", "/queue/orders", "queue://orders"):
        result = mqstore("browse", name, "--dsn", dsn, "--json")
        assert result.returncode == 0, result.stderr
        assert '"body": "hello"' in result.stdout
    empty = mqstore("browse", "/topic/none", "--dsn", dsn)
    assert empty.returncode == 0 and "nothing is stored under topic://none" in empty.stderr
    _one_line_error(mqstore("browse", "bogus://x", "--dsn", dsn), "is not a destination")
    assert mqstore("browse", "orders", "--limit", "-5", "--dsn", dsn).returncode == 2


def _with_options(dsn: str, options: str) -> str:
    url = make_url(dsn).update_query_dict({"options": options})
    return url.render_as_string(hide_password=False)


@pytest.mark.parametrize(
    "args",
    [["history", "trim", "--older-than-days", "1"], ["journal", "forget", "j1", "--yes"]],
    ids=str,
)
def test_a_read_only_database_is_named(dsn: str, args: list[str]) -> None:
    read_only = _with_options(dsn, "-cdefault_transaction_read_only=on")  # as on a standby
    _one_line_error(mqstore(*args, "--dsn", read_only), "point the DSN at the primary")


@pytest.mark.parametrize(
    "args",
    [["db", "status"], ["stats"], ["browse", "orders"], ["lock", "status"]],
    ids=" ".join,
)
@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("statement_timeout=300", "statement timeout: the statement was cancelled"),
        ("lock_timeout=300", "lock timeout: another session holds a lock"),
    ],
    ids=["statement_timeout", "lock_timeout"],
)
def test_a_timeout_of_the_role_is_named(
    dsn: str, engine: Engine, args: list[str], setting: str, words: str
) -> None:
    with engine.connect() as holder:  # a session in the middle of using the tables
        holder.execute(sa.text("LOCK TABLE activemq_msgs, activemq_lock IN ACCESS EXCLUSIVE MODE"))
        result = mqstore(*args, "--dsn", _with_options(dsn, f"-c{setting}"))
        holder.rollback()
    _one_line_error(result, words)
    assert "cannot connect" not in result.stderr


def test_a_connection_ended_mid_command_is_named(dsn: str, engine: Engine) -> None:
    """A server restart (or an administrator) ends the command's session while it works."""
    with engine.connect() as holder:
        holder.execute(sa.text("LOCK TABLE activemq_msgs IN ACCESS EXCLUSIVE MODE"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "mqstore", "db", "status", "--dsn", dsn],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        ended = 0
        deadline = time.monotonic() + 60
        while not ended and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            with engine.begin() as admin:  # a new transaction sees pg_stat_activity anew
                ended = admin.execute(
                    sa.text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                ).scalar_one()
        out, err = proc.communicate(timeout=60)
        holder.rollback()
    assert ended, err
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    _one_line_error(result, "lost the connection to PostgreSQL")


@pytest.mark.parametrize(
    ("name", "words"),
    [("", "cannot be empty"), ("   ", "cannot be empty"), ("b" * 251, "holds at most 250")],
    ids=["empty", "blank", "longer than the lock column"],
)
def test_serve_refuses_a_broker_name_the_lock_row_cannot_hold(
    dsn: str, tmp_path: Path, name: str, words: str
) -> None:
    """An empty name makes a lock holder nobody can tell apart; one longer than
    ACTIVEMQ_LOCK.BROKER_NAME made serve retry the lock for ever instead of saying why."""
    result = subprocess.run(
        [sys.executable, "-m", "mqstore", "serve", "--dsn", dsn, "--data-dir", str(tmp_path),
         "--no-journal", "--stomp", "127.0.0.1:0", "--broker-name", name],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    _one_line_error(result, words)
    assert "serving STOMP" not in result.stdout


@pytest.mark.parametrize(
    "command", [["stats"], ["export", "--out", "out"]], ids=["stats", "export"]
)
def test_a_data_dir_under_the_home_directory_is_expanded(
    tmp_path: Path, command: list[str]
) -> None:
    """``MQSTORE_DATA_DIR=~/mqstore`` in an environment file reaches mqstore unexpanded; it
    means the home directory, not a directory named ``~`` in the working directory (for the
    Spark jobs too)."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MQSTORE_")}
    env.update(HOME=str(home), MQSTORE_DATA_DIR="~/mqstore")
    result = subprocess.run(
        [sys.executable, "-m", "mqstore", *command], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    # the Spark jobs' exit code for what a user gets wrong is 1, mqstore's is 2
    assert result.returncode == (1 if command[0] == "export" else 2), result.stderr
    assert f"no embedded store in {home / 'mqstore'}:" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_serve_journal_flag_wins_over_the_environment(dsn: str, tmp_path: Path) -> None:
    """Flags win over ``MQSTORE_*``: ``--journal`` turns the journal on where the
    environment turned it off (seen by the row lock, which a journaled broker refuses)."""
    env = {**os.environ, "MQSTORE_JOURNAL": "false", "MQSTORE_LOCK": "row"}
    args = ["serve", "--dsn", dsn, "--data-dir", str(tmp_path), "--stomp", "127.0.0.1:0"]
    result = mqstore(*args, "--journal", env=env)
    _one_line_error(result, "the row lock pairs this broker with ActiveMQ standbys")


@pytest.mark.parametrize(
    "args", [["--no-journal"], ["--no-journal", "--lock", "none"]], ids=" ".join
)
def test_serve_on_a_read_only_database_says_so_and_exits(
    dsn: str, tmp_path: Path, args: list[str]
) -> None:
    """A standby's DSN: with a lease the broker retried its lock for ever; without a lock it
    listened and accepted messages it could not store."""
    read_only = _with_options(dsn, "-cdefault_transaction_read_only=on")
    result = subprocess.run(
        [sys.executable, "-m", "mqstore", "serve", "--dsn", read_only, "--data-dir",
         str(tmp_path), "--stomp", "127.0.0.1:0", "--log-level", "WARNING", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    _one_line_error(result, "is read-only")
    assert "point the DSN at the primary" in result.stderr
    assert "serving STOMP" not in result.stdout
