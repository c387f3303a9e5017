"""The CLI as a user runs it: one-line errors, exit codes, db lifecycle, browse."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.conftest import REPO, load_activemq_fixture


def mqstore(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mqstore", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def test_bad_dsn_is_one_line_without_traceback() -> None:
    for dsn, words in [
        ("mysql://u@h/db", "runs on PostgreSQL"),
        ("not a dsn", "invalid DSN"),
        ("postgresql://u@127.0.0.1:1/db", "cannot connect"),
    ]:
        result = mqstore("db", "check", "--dsn", dsn)
        assert result.returncode == 2
        assert words in result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) <= 2
    # the DSN is shown as the user writes it, without SQLAlchemy's driver suffix
    assert "(postgresql://u@127.0.0.1:1/db)" in result.stderr


def test_a_misspelt_setting_is_named_with_the_one_meant(dsn: str) -> None:
    """An unknown variable is ignored, as pydantic-settings does: one that looks like a
    misspelt setting says so, so the setting meant is not silently left at its default."""
    env = {**os.environ, "MQSTORE_JOURNAL_SYNCC": "always", "MQSTORE_OTHER_TOOL": "x"}
    result = mqstore("db", "check", "--dsn", dsn, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines() == [
        "environment variable MQSTORE_JOURNAL_SYNCC is not an mqstore setting and is "
        "ignored; did you mean MQSTORE_JOURNAL_SYNC?"
    ]


def test_missing_database_says_how_to_fix(empty_dsn: str) -> None:
    dsn = empty_dsn.rsplit("/", 1)[0] + "/no_such_db_here"
    result = mqstore("db", "check", "--dsn", dsn)
    assert result.returncode == 2 and "does not exist" in result.stderr


def test_upgrade_check_downgrade_cycle(empty_dsn: str) -> None:
    assert mqstore("db", "check", "--dsn", empty_dsn).returncode == 1
    up = mqstore("db", "upgrade", "--dsn", empty_dsn)
    assert up.returncode == 0, up.stderr
    assert mqstore("db", "check", "--dsn", empty_dsn).returncode == 0
    assert mqstore("db", "downgrade", "base", "--yes", "--dsn", empty_dsn).returncode == 0
    assert mqstore("db", "check", "--dsn", empty_dsn).returncode == 1


def test_an_upgrade_beside_another_prefixs_tables_says_what_it_made(empty_dsn: str) -> None:
    """A forgotten --table-prefix makes a new, empty set of tables: the upgrade says so,
    names the prefix the broker's tables have, and how to drop the empty set again."""
    first = mqstore("db", "upgrade", "--dsn", empty_dsn, "--table-prefix", "BRK1_")
    assert first.returncode == 0 and "note:" not in first.stderr, first.stderr
    forgot = mqstore("db", "upgrade", "--dsn", empty_dsn)
    assert forgot.returncode == 0, forgot.stderr
    [note] = [line for line in forgot.stderr.splitlines() if line.strip()]
    assert note.startswith(
        "note: made a new, empty set of tables (--table-prefix '') beside the tables of "
        "prefix 'BRK1_' in this schema; if the broker's messages are in those, give "
        "--table-prefix BRK1_"
    ), note
    again = mqstore("db", "upgrade", "--dsn", empty_dsn)
    assert again.returncode == 0 and "note:" not in again.stderr, again.stderr
    other = mqstore("db", "upgrade", "--dsn", empty_dsn, "--table-prefix", "BRK2_")
    assert "beside the tables of prefix 'BRK1_', '' in this schema" in other.stderr, other.stderr
    # The command it gives drops the empty set, run as printed.
    command = shlex.split(note.rsplit("`", 2)[1])
    assert command[:4] == ["mqstore", "db", "downgrade", "base"], note
    dropped = mqstore(*command[1:], "--dsn", empty_dsn)
    assert dropped.returncode == 0, dropped.stderr
    assert mqstore("db", "check", "--dsn", empty_dsn).returncode == 1
    assert mqstore("db", "check", "--dsn", empty_dsn, "--table-prefix", "BRK1_").returncode == 0


def test_bad_prefix_is_a_config_error(empty_dsn: str) -> None:
    result = mqstore("db", "upgrade", "--dsn", empty_dsn, "--table-prefix", "bad-prefix!")
    assert result.returncode == 2 and "table prefix" in result.stderr


def test_adopt_then_browse_the_activemq_fixture(empty_engine: Engine, empty_dsn: str) -> None:
    load_activemq_fixture(empty_engine)
    adopted = mqstore("db", "adopt", "--dsn", empty_dsn)
    assert adopted.returncode == 0, adopted.stderr
    assert mqstore("db", "check", "--dsn", empty_dsn).returncode == 0
    again = mqstore("db", "adopt", "--dsn", empty_dsn)
    assert again.returncode == 2 and "already managed" in again.stderr
    browse = mqstore("browse", "FIXTURE.Q", "--dsn", empty_dsn, "--json")
    assert browse.returncode == 0, browse.stderr
    views = json.loads(browse.stdout)
    assert [v["id"] for v in views] == [1, 2, 3, 4, 5, 6, 12, 13, 14, 15, 16, 17]
    first = views[0]
    assert first["jms_message_id"] == "ID:vm-43775-1795306854999-3:4:-1:1:1"
    assert first["body"] == "stomp text p0"
    assert first["properties"]["str_prop"] == "alpha"
    stats = mqstore("stats", "--dsn", empty_dsn, "--json")
    figures = json.loads(stats.stdout)
    assert figures["destinations"] == {"queue://FIXTURE.Q": 12, "topic://FIXTURE.T": 5}
    backlog = {s["name"]: s["backlog"] for s in figures["subscriptions"]}
    assert backlog == {"subA": 2, "subB": 5}


def test_passwords_in_dsns_never_reach_error_messages() -> None:
    keyword = "host=127.0.0.1 user=postgres password=S3CRET_KV dbname=postgres"
    query = "postgresql://postgres@127.0.0.1:1/db?password=S3CRET_Q"
    for dsn, secret in [(keyword, "S3CRET_KV"), (query, "S3CRET_Q")]:
        result = mqstore("db", "check", "--dsn", dsn)
        assert result.returncode == 2
        assert secret not in result.stdout + result.stderr
    alembic = subprocess.run(
        [sys.executable, "-m", "alembic", "current"],
        cwd=REPO,
        env={"MQSTORE_DSN": keyword, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert alembic.returncode != 0
    assert "S3CRET_KV" not in alembic.stdout + alembic.stderr


def test_stats_reads_a_database_only_activemq_used(empty_dsn: str, empty_engine: Engine) -> None:
    """A read-only look needs no schema change: no mqstore table is required."""
    load_activemq_fixture(empty_engine)
    result = mqstore("stats", "--json", "--dsn", empty_dsn)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["destinations"] == {"queue://FIXTURE.Q": 12, "topic://FIXTURE.T": 5}
    assert {s["name"]: s["backlog"] for s in data["subscriptions"]} == {"subA": 2, "subB": 5}
    assert data["lock"]["state"] == "free" and data["journal"] is None


def test_stats_shows_the_database_when_the_journal_cannot_be_read(
    empty_dsn: str, empty_engine: Engine, tmp_path: Path
) -> None:
    """A segment the process may not read (here a symlink loop, which root cannot read
    either) is the journal's problem in the figures, not a failed command."""
    load_activemq_fixture(empty_engine)
    journal = tmp_path / "journal"
    journal.mkdir()
    (journal / "0000000000000001.wal").symlink_to("0000000000000001.wal")
    result = mqstore("stats", "--json", "--dsn", empty_dsn, "--data-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["destinations"] == {"queue://FIXTURE.Q": 12, "topic://FIXTURE.T": 5}
    assert data["journal"]["problem"].startswith(f"cannot read {journal}/0000000000000001.wal")


def test_a_dsn_without_its_host_never_shows_the_password() -> None:
    """``postgresql://USER:PASSWORD/DB`` (the ``@HOST`` forgotten) reads as HOST:PORT, and the
    "port" that is no number is the password: the error must neither echo it nor be a
    traceback, from mqstore or from alembic."""
    dsn = "postgresql://mqstore:Hunter2secret/broker"
    result = mqstore("stats", "--dsn", dsn)
    assert result.returncode == 2
    assert "Hunter2secret" not in result.stdout + result.stderr
    assert "invalid DSN" in result.stderr and "@HOST" in result.stderr
    assert "Traceback" not in result.stderr
    alembic = subprocess.run(
        [sys.executable, "-m", "alembic", "-x", f"dsn={dsn}", "current"],
        cwd=REPO, env={**os.environ, "MQSTORE_DSN": ""}, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert alembic.returncode != 0
    assert "Hunter2secret" not in alembic.stdout + alembic.stderr
    assert "Traceback" not in alembic.stderr


def test_a_dsn_query_the_driver_cannot_take_is_one_line() -> None:
    result = mqstore("stats", "--dsn", "postgresql://mqstore:Hunter2secret@/broker?port=abc")
    assert result.returncode == 2, result.stderr
    assert "invalid DSN" in result.stderr and "port" in result.stderr
    assert "Traceback" not in result.stderr
    assert "Hunter2secret" not in result.stderr


def test_every_serve_option_that_mirrors_a_setting_names_its_variable() -> None:
    """The README promises each flag mirrors an ``MQSTORE_`` setting; --help is where an
    operator looks up which variable sets it in a unit file."""
    import typer

    from mqstore.cli import app
    from mqstore.settings import Settings

    group = typer.main.get_command(app)
    serve = group.commands["serve"]  # type: ignore[attr-defined]
    missing = []
    for param in serve.params:
        setting = str(param.name)
        variable = f"MQSTORE_{setting.upper()}"
        if setting in Settings.model_fields and variable not in (getattr(param, "help", "") or ""):
            missing.append(f"--{setting.replace('_', '-')}")
    assert not missing, f"--help names no MQSTORE_ variable for {missing}"


def test_stats_describes_journal_damage_in_words(
    empty_dsn: str, empty_engine: Engine, tmp_path: Path
) -> None:
    """Damage is said as the operator acts on it (what, where, and the repair command), not
    as a Python object's repr."""
    from journal import Journal, PurgeDestination

    load_activemq_fixture(empty_engine)
    journal_dir = tmp_path / "journal"
    with Journal.open(journal_dir) as journal:
        ends = [journal.append([PurgeDestination(f"queue://Q{i}")]) for i in range(3)]
    segment = next(journal_dir.glob("*.wal"))
    data = bytearray(segment.read_bytes())
    data[ends[0].offset - 6] ^= 0xFF  # inside the first record; two intact ones follow
    segment.write_bytes(bytes(data))
    result = mqstore("stats", "--json", "--dsn", empty_dsn, "--data-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    problem = json.loads(result.stdout)["journal"]["problem"]
    assert "Problem(" not in problem
    assert f"corrupt at {segment.name} offset" in problem, problem
    assert f"mqstore journal repair --dry-run {journal_dir}" in problem, problem
    shown = mqstore("stats", "--dsn", empty_dsn, "--data-dir", str(tmp_path))
    assert "Problem(" not in shown.stdout and "corrupt at" in " ".join(shown.stdout.split())


def checkpointed_journal(engine: Engine, journal_dir: Path) -> None:
    """A journal in ``journal_dir`` whose one message a clean stop checkpointed (its
    position is then stored in the database)."""
    from journal.store import JournaledStore
    from mqstore.lock import NoLocker
    from mqstore.store import PostgresStore
    from tests.integration.conftest import msg

    store = JournaledStore(
        PostgresStore(engine, locker=NoLocker(), cleanup_interval_s=0), journal_dir,
        shared_lock=False,
    )  # fmt: skip
    store.start()
    store.add([msg("queue://q", 1)])
    store.stop()


def test_stats_shows_its_own_journals_checkpoint_and_knows_another_databases(
    dsn: str, engine: Engine, tmp_path: Path
) -> None:
    """Several journals write their positions to one table (brokers on other prefixes, a
    forgotten journal): stats shows the row of the journal it was given, and says when the
    database has none (a journal of another database)."""
    journal_dir = tmp_path / "brokers-journal"
    checkpointed_journal(engine, journal_dir)
    with engine.connect() as conn:
        [ours] = conn.execute(sa.text("SELECT segment, position FROM mqstore_journal")).all()
    with engine.begin() as conn:  # another journal, checkpointed later and further
        conn.execute(
            sa.text(
                "INSERT INTO mqstore_journal (journal_id, segment, position, updated_at) "
                "VALUES ('5a0c1d2e-0000-4000-8000-000000000000', 9, 999, 9999999999999)"
            )
        )
    env = {**os.environ, "MQSTORE_JOURNAL_DIR": str(journal_dir)}
    result = mqstore("stats", "--json", "--dsn", dsn, env=env)
    assert result.returncode == 0, result.stderr
    journal = json.loads(result.stdout)["journal"]
    assert journal["checkpointed_to"] == f"{ours.segment}:{ours.position}"
    assert journal["of_this_database"] is True
    (journal_dir / "journal-id").write_text("0b6c4d2e-0000-4000-8000-000000000000\n")
    shown = mqstore("stats", "--dsn", dsn, "--journal-dir", str(journal_dir))
    assert shown.returncode == 0, shown.stderr
    assert "not a journal of this database" in " ".join(shown.stdout.split())


def test_serve_and_db_status_on_a_forgotten_prefix_name_the_prefix_whose_tables_are_there(
    empty_dsn: str, tmp_path: Path
) -> None:
    assert mqstore("db", "upgrade", "--dsn", empty_dsn, "--table-prefix", "BRK1_").returncode == 0
    serve = mqstore("serve", "--dsn", empty_dsn, "--no-journal", "--stomp", "127.0.0.1:0",
                    "--data-dir", str(tmp_path))  # fmt: skip
    status = mqstore("db", "status", "--dsn", empty_dsn)
    assert serve.returncode == 2, serve.stderr
    for said in (serve.stderr, status.stdout + status.stderr):
        assert "no mqstore schema for prefix ''" in said, said
        assert "(tables with prefix 'BRK1_' are there)" in said, said


def test_reads_on_a_forgotten_prefix_name_the_prefix_whose_tables_are_there(
    empty_dsn: str,
) -> None:
    assert mqstore("db", "upgrade", "--dsn", empty_dsn, "--table-prefix", "BRK1_").returncode == 0
    for args in (["stats"], ["browse", "orders"], ["lock", "status"]):
        result = mqstore(*args, "--dsn", empty_dsn)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        said = " ".join(result.stderr.split())
        assert "tables with prefix 'BRK1_' are there: give that prefix" in said, (args, said)
        assert "Traceback" not in said
