"""A SEND whose COMMIT lost its database connection may have been stored: the client's ERROR
says so, rather than that nothing was done (a retry could store the message twice)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.broker.harness import connect
from tests.interop.conftest import MqstoreServer

END_AT_COMMIT = (
    "CREATE FUNCTION end_session() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$",
    "CREATE CONSTRAINT TRIGGER end_at_commit AFTER INSERT ON activemq_msgs "
    "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION end_session()",
)


def test_a_send_whose_commit_lost_the_database_is_not_said_to_be_undone(
    dsn: str, engine: Engine, tmp_path: Path
) -> None:
    server = MqstoreServer(dsn, tmp_path, name="unknown", journal=False).start()
    try:
        with engine.begin() as conn:  # the session ends itself as its COMMIT runs
            for statement in END_AT_COMMIT:
                conn.execute(sa.text(statement))
        conn_, client = connect(server.port)
        conn_.send("/queue/unknown", "m1", headers={"persistent": "true"}, receipt="r-m1")
        assert client.wait(lambda: client.errors, 20)
        said = client.errors[0].headers["message"]
        assert "may or may not have been done" in said, said
        assert "nothing of this frame was done" not in said
    finally:
        server.stop()
