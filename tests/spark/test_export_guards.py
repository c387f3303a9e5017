"""An export directory is the archive of one database and table prefix, written by one run at
a time: what `export` and `history trim --exported` refuse, and the one line they say."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from mqstore import migrate
from mqstore.db import create_engine
from mqstore.errors import ConfigError
from spark_etl.export import export, load_watermarks
from tests.conftest import Databases, count_rows
from tests.integration.test_cli import mqstore
from tests.spark.conftest import dsn_of, execute
from tests.spark.test_export import _add, _files

TWO_DAYS_AGO = 1795200000000


def _history(engine: Engine, table: str, container: str, rows: int = 5) -> None:
    """``rows`` removals recorded two days before the exports below run."""
    execute(
        engine,
        f"INSERT INTO {table} (id, container, msgid_prod, msgid_seq, priority, expiration,"
        " enqueued_at, removed_at, outcome) SELECT 1000 + g, :c, 'ID:x-1-1-1:1:1', g, 0, 0,"
        " :at, :at + g, 'acknowledged' FROM generate_series(1, :n) g",
        {"c": container, "at": TWO_DAYS_AGO, "n": rows},
    )


def _trim(dsn: str, out: Path, *more: str) -> Any:
    return mqstore("history", "trim", "--dsn", dsn, "--exported", str(out), *more)


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.fixture
def other_engine(databases: Databases) -> Iterator[Engine]:
    """A second database migrated by mqstore, on the same server."""
    eng = create_engine(databases.dsn_for(databases.create(template=databases.migrated_template())))
    yield eng
    eng.dispose()


def test_an_archive_of_another_table_prefix_is_refused_and_its_history_kept(
    spark: Any, engine: Engine, tmp_path: Path
) -> None:
    migrate.upgrade(engine, "BRK1_")
    _add(engine, 1, 1)
    execute(engine, "INSERT INTO brk1_activemq_msgs SELECT * FROM activemq_msgs")
    _history(engine, "mqstore_history", "queue://A")
    _history(engine, "brk1_mqstore_history", "queue://B1")
    dsn, out = dsn_of(engine), tmp_path / "archive"
    assert export(spark, dsn, out).history_rows == 5
    files, marks = _files(out), load_watermarks(out)

    with pytest.raises(ConfigError, match=r"table prefix '', not 'BRK1_'.*another --out"):
        export(spark, dsn, out, "BRK1_")
    assert _files(out) == files and load_watermarks(out) == marks
    trim = _trim(dsn, out, "--table-prefix", "BRK1_")
    assert trim.returncode == 2 and "table prefix ''" in _one_line(trim.stderr)
    assert count_rows(engine, "brk1_mqstore_history") == 5

    own = export(spark, dsn, tmp_path / "brk1", "BRK1_")  # its own directory
    assert (own.message_rows, own.history_rows) == (1, 5)
    trim = _trim(dsn, tmp_path / "brk1", "--table-prefix", "BRK1_")
    assert "deleted 5 history row(s)" in trim.stdout, trim.stderr
    assert count_rows(engine, "mqstore_history") == 5


def test_an_archive_of_another_database_is_refused_and_its_history_kept(
    spark: Any, engine: Engine, other_engine: Engine, tmp_path: Path
) -> None:
    _history(engine, "mqstore_history", "queue://a")
    _history(other_engine, "mqstore_history", "queue://b")  # same hist_ids and ids
    out = tmp_path / "archive"
    export(spark, dsn_of(engine), out)
    files = _files(out)
    with pytest.raises(ConfigError, match=r"archives database '\w+' .*not database"):
        export(spark, dsn_of(other_engine), out)
    assert _files(out) == files
    trim = _trim(dsn_of(other_engine), out)
    assert trim.returncode == 2 and "archives database" in _one_line(trim.stderr)
    assert count_rows(other_engine, "mqstore_history") == 5
    trim = _trim(dsn_of(engine), out)
    assert "deleted 5 history row(s)" in trim.stdout, trim.stderr


def _forget_database(out: Path) -> None:
    """Rewrite the watermarks as exports wrote them before they recorded the database."""
    marks = load_watermarks(out)
    marks.pop("database", None)
    (out / "_watermarks.json").write_text(json.dumps({**marks, "format": 2}))


def test_watermarks_that_do_not_name_their_database_are_checked_before_trusted(
    spark: Any, engine: Engine, other_engine: Engine, tmp_path: Path
) -> None:
    for eng, queue in ((engine, "queue://a"), (other_engine, "queue://b")):
        _add(eng, 1, 1, queue)
        _history(eng, "mqstore_history", queue)
    out = tmp_path / "archive"
    export(spark, dsn_of(engine), out)
    _forget_database(out)

    trim = _trim(dsn_of(engine), out)
    assert trim.returncode == 2
    assert "does not record which database" in _one_line(trim.stderr)
    assert count_rows(engine, "mqstore_history") == 5

    files = _files(out)
    with pytest.raises(ConfigError, match=r"does not hold 1 message row\(s\) and 5 history"):
        export(spark, dsn_of(other_engine), out)
    assert _files(out) == files and "database" not in load_watermarks(out)
    assert not list((out / "_staging").iterdir())

    _add(engine, 2, 2, "queue://a")
    again = export(spark, dsn_of(engine), out)  # checked: this database's; now recorded
    assert (again.message_rows, again.history_rows) == (1, 0)
    assert load_watermarks(out)["database"]["name"] == engine.url.database
    trim = _trim(dsn_of(engine), out)
    assert "deleted 5 history row(s)" in trim.stdout, trim.stderr


def test_unrecorded_watermarks_over_rows_without_a_message_id_are_recognised(
    spark: Any, engine: Engine, tmp_path: Path
) -> None:
    """MSGID_PROD and MSGID_SEQ may be null (in the history too): such a row, archived, is
    this database's row all the same, not a sign of another database."""
    _add(engine, 1, 1, "queue://a")
    _add(engine, 2, 2, "queue://a")
    _history(engine, "mqstore_history", "queue://a")
    execute(engine, "UPDATE activemq_msgs SET msgid_prod = NULL, msgid_seq = NULL WHERE id = 1")
    execute(engine, "UPDATE mqstore_history SET msgid_prod = NULL, msgid_seq = NULL")
    out = tmp_path / "archive"
    export(spark, dsn_of(engine), out)
    _forget_database(out)

    again = export(spark, dsn_of(engine), out)
    assert (again.message_rows, again.history_rows) == (0, 0)
    assert load_watermarks(out)["database"]["name"] == engine.url.database


def test_lost_or_blank_watermarks_beside_an_archive_are_refused(
    spark: Any, activemq_engine: Engine, tmp_path: Path
) -> None:
    dsn = dsn_of(activemq_engine)
    export(spark, dsn, tmp_path)
    files, marks = _files(tmp_path), tmp_path / "_watermarks.json"
    saved = marks.read_text()
    for content, words in (
        ("{}", "not an export's watermarks"),
        ("", "not JSON"),
        (saved[:40], "not JSON"),
        (None, "holds exported Parquet files .* but no _watermarks.json"),
    ):
        if content is None:
            marks.unlink()
        else:
            marks.write_text(content)
        with pytest.raises(ConfigError, match=f"{words}.*restore it from a backup"):
            export(spark, dsn, tmp_path)
    assert _files(tmp_path) == files
    marks.write_text(saved)
    again = export(spark, dsn, tmp_path)
    assert again.message_rows == 0 and _files(tmp_path) == files


def test_an_export_holds_its_directory_for_the_whole_run(
    spark: Any, activemq_engine: Engine, tmp_path: Path
) -> None:
    dsn, out = dsn_of(activemq_engine), tmp_path / "archive"
    taken: list[bool] = []

    def step(_name: str) -> None:
        fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            taken.append(False)
        except BlockingIOError:
            taken.append(True)
        finally:
            os.close(fd)

    assert export(spark, dsn, out, progress=step).message_rows == 17
    assert taken == [True] * 5

    fd = os.open(out / ".lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another run is writing
    try:
        with pytest.raises(ConfigError, match=f"another export is writing {out}"):
            export(spark, dsn, out)
        cli = mqstore("export", "--out", str(out), "--dsn", dsn, "--master", "local[1]")
        assert cli.returncode == 1
        assert _one_line(cli.stderr).startswith(f"error: another export is writing {out}")
    finally:
        os.close(fd)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("job", "case", "words"),
    [
        ("export", "unknown-role", "'nosuchrole'"),
        ("audit", "missing-database", "database 'mqsspk_nosuchdb' does not exist"),
        ("export", "refused-port", "cannot connect to PostgreSQL at 127.0.0.1:"),
        ("audit", "wrong-prefix", "no table nope_activemq_msgs, nope_activemq_acks"),
        ("export", "out-is-a-file", "is not a directory"),
        ("export", "bad-master", "unknown --master 'bogus://x'"),
        ("audit", "bad-master", "unknown --master 'bogus://x'"),
        ("export", "bad-memory", "invalid --driver-memory 'lots'"),
        (
            "export",
            "no-java",
            "install a Java 17 runtime (e.g. apt-get install "
            "openjdk-17-jre-headless) or set JAVA_HOME",
        ),
        ("export", "corrupt-watermarks", "not JSON"),
        ("audit", "missing-jar", "'/nonexistent/pg.jar' from $MQSTORE_JDBC_JAR does not exist"),
        ("export", "jar-is-a-directory", "from $MQSTORE_JDBC_JAR is not a file: point"),
        ("export", "jar-without-the-driver", "holds no PostgreSQL JDBC driver"),
        ("export", "empty-out", "--out is empty: give a directory"),
        ("audit", "empty-archive", "--archive is empty: give a directory"),
        ("audit", "out-under-a-file", "Not a directory: "),
        ("export", "unwritable-out", "cannot be written ("),
        ("audit", "unwritable-out", "cannot be written ("),
    ],
)
def test_cli_mistakes_are_one_line_and_exit_1(
    dsn: str, tmp_path: Path, job: str, case: str, words: str
) -> None:
    out = tmp_path / "out"
    args = ["--dsn", dsn, "--out", str(out), "--master", "local[1]"]
    url = dsn.replace("postgresql+psycopg://", "postgresql://")
    server, _, _db = url.rpartition("/")
    if case == "unknown-role":
        args[1] = "postgresql://nosuchrole@" + server.split("@", 1)[1] + "/" + _db
    elif case == "missing-database":
        args[1] = server + "/mqsspk_nosuchdb"
    elif case == "refused-port":
        args[1] = f"postgresql://postgres@127.0.0.1:{_free_port()}/postgres"
    elif case == "wrong-prefix":
        args += ["--table-prefix", "NOPE_"]
    elif case == "out-is-a-file":
        out.write_text("not a directory")
    elif case == "bad-master":
        args[-1] = "bogus://x"
    elif case == "bad-memory":
        args += ["--driver-memory", "lots"]
    elif case == "empty-out":
        args[3] = ""
    elif case == "empty-archive":
        args += ["--archive", ""]
    elif case == "out-under-a-file":
        (tmp_path / "file").write_text("")
        args[3] = str(tmp_path / "file" / "out")
    elif case == "unwritable-out":  # no one may create a directory in sysfs
        args[3] = "/sys/mqstore-spark-tests/out"
    elif case == "corrupt-watermarks":
        out.mkdir()
        (out / "_watermarks.json").write_text('{"run_id": "2026')
    env = None
    if case in ("missing-jar", "jar-is-a-directory", "jar-without-the-driver"):
        jar = {"missing-jar": "/nonexistent/pg.jar", "jar-is-a-directory": str(tmp_path)}.get(
            case, str(tmp_path / "other.jar")
        )
        with zipfile.ZipFile(tmp_path / "other.jar", "w") as other:  # a jar, not the driver's
            other.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        env = {**os.environ, "MQSTORE_JDBC_JAR": jar}
    elif case == "no-java":
        env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
        env["PATH"] = str(tmp_path / "bin")  # holds no java
    result = mqstore(job, *args, env=env)
    assert result.returncode == 1
    if case == "jar-without-the-driver":  # the JVM started: its start-up lines come first
        [line] = [x for x in result.stderr.splitlines() if x.startswith("error: ")]
        assert "Traceback" not in result.stderr
    else:
        line = _one_line(result.stderr)
    assert line.startswith("error: ") and words in line
    assert not (out / "audit.json").exists()
    if case in ("bad-master", "bad-memory", "no-java"):  # refused before anything is made
        assert not out.exists()


def test_audit_refuses_negative_thresholds(dsn: str, tmp_path: Path) -> None:
    result = mqstore("audit", "--dsn", dsn, "--out", str(tmp_path), "--max-backlog", "-5")
    assert result.returncode == 2  # a usage error, before anything is read
    assert "Invalid value for '--max-backlog'" in result.stderr
    assert not (tmp_path / "audit.json").exists()
