"""Without a DSN, export and audit say in one line which DSN to give: the embedded store
(``mqstore serve`` with no DSN) listens on a Unix socket, which the JDBC driver cannot use."""

from __future__ import annotations

import pytest

from tests.integration.test_embedded import Workdir, _free_port


@pytest.mark.parametrize("job", ["export", "audit"])
def test_without_a_dsn_the_jobs_say_which_to_give(job: str) -> None:
    work = Workdir()
    try:
        alone = work.run(job, "--out", "out", "--master", "local[1]")
        assert alone.returncode == 1 and "Traceback" not in alone.stderr
        assert alone.stderr.strip().splitlines() == [
            "error: no --dsn given: pass --dsn postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME "
            "(or set MQSTORE_DSN) of the database the broker stores in"
        ]

        proc = work.serve(_free_port(), "serve.log")
        work.wait_serving(proc, "serve.log")
        beside = work.run(job, "--out", "out", "--master", "local[1]")
        assert beside.returncode == 1 and "Traceback" not in beside.stderr
        lines = beside.stderr.strip().splitlines()
        assert len(lines) == 1, beside.stderr
        assert lines[0].startswith(
            "error: no --dsn given, and Spark cannot read the embedded store in ./mqstore-data"
        )
        assert "pass --dsn (or set MQSTORE_DSN) of a PostgreSQL reachable over TCP" in lines[0]
        assert not (work.path / "out").exists()
    finally:
        work.close()
