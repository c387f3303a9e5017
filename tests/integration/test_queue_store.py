"""Queue semantics of the PostgreSQL store, as ActiveMQ's JDBC store has them."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from mqstore.db import create_engine
from mqstore.errors import (
    CommitOutcomeUnknownError,
    ConfigError,
    DatabaseUnavailableError,
    DuplicateMessageError,
    InvalidMessageError,
    MessageNotFoundError,
    SchemaVersionError,
    StoreClosedError,
)
from mqstore.store import Batch, Outcome, PostgresStore, Removal
from tests.integration.conftest import StoreFactory, msg

Q = "queue://orders"


def _seqs(rows: list) -> list[int]:  # type: ignore[type-arg]
    return [r.msgid_seq for r in rows]


def test_plain_mode_is_fifo_and_stores_priority_zero(store: PostgresStore, engine: Engine) -> None:
    ids = store.add([msg(Q, 1, priority=0), msg(Q, 2, priority=9), msg(Q, 3, priority=4)])
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert _seqs(store.page(Q, None, 10)) == [1, 2, 3]
    with engine.connect() as conn:
        assert set(conn.execute(sa.text("SELECT priority FROM activemq_msgs")).scalars()) == {0}


def test_prioritized_mode_orders_priority_then_fifo(make_store: StoreFactory) -> None:
    store = make_store(prioritized=True)
    store.add(
        [
            msg(Q, 1, priority=0),
            msg(Q, 2, priority=9),
            msg(Q, 3, priority=4),
            msg(Q, 4, priority=9),
            msg(Q, 5, priority=4),
        ]
    )
    assert _seqs(store.page(Q, None, 10)) == [2, 4, 3, 5, 1]


def test_paging_across_pages_with_cursor(make_store: StoreFactory) -> None:
    store = make_store(prioritized=True)
    store.add([msg(Q, i, priority=i % 10) for i in range(1, 96)])
    seen: list[int] = []
    cursor = None
    while page := store.page(Q, cursor, 7):
        seen += _seqs(page)
        cursor = page[-1].cursor
    expected = sorted(range(1, 96), key=lambda i: (-(i % 10), i))
    assert seen == expected


def test_remove_count_find_update_purge(store: PostgresStore) -> None:
    ids = store.add([msg(Q, i) for i in range(1, 6)])
    assert store.count(Q) == 5
    assert store.remove(Q, ids[:2]) == 2
    assert store.remove(Q, ids[:2]) == 0  # already gone
    assert store.count(Q) == 3
    found = store.find("ID:test-1:1:1", 4)
    assert found is not None and found.id == ids[3] and found.msg == b"body-4"
    store.update(Q, ids[3], b"rewritten")
    assert store.get(ids[3]).msg == b"rewritten"  # type: ignore[union-attr]
    with pytest.raises(MessageNotFoundError):
        store.update(Q, ids[0], b"gone")
    assert store.destinations() == [Q]
    assert store.purge(Q) == 3
    assert store.count(Q) == 0


def test_purge_keeps_messages_sent_while_it_runs(store: PostgresStore) -> None:
    """As ActiveMQ's one DELETE: a purge removes what was stored when it began, so a busy
    queue's purge ends and a producer's later messages survive it."""
    store.add([msg(Q, i) for i in range(1, 4)])
    remove = store.remove
    sent: list[int] = []

    def remove_then_send(*args: object, **kwargs: object) -> int:
        removed = remove(*args, **kwargs)  # type: ignore[arg-type]
        sent.extend(store.add([msg(Q, 100 + len(sent))]))  # a producer between two chunks
        return removed

    store.remove = remove_then_send  # type: ignore[method-assign]
    assert store.purge(Q) == 3
    del store.remove
    assert [m.id for m in store.page(Q, None, 10)] == sent


def test_purge_of_a_store_not_started_is_refused(make_store: StoreFactory) -> None:
    store = make_store()
    store.add([msg(Q, 1)])
    store.stop()
    with pytest.raises(StoreClosedError):
        store.purge(Q)


def test_batch_is_atomic(store: PostgresStore) -> None:
    [first] = store.add([msg(Q, 1)])
    with pytest.raises(DuplicateMessageError):
        store.commit(Batch(adds=[msg(Q, 2), msg(Q, 1)], removes=[Removal(Q, first)]))
    assert _seqs(store.page(Q, None, 10)) == [1]


def test_duplicate_jms_id_in_one_destination_is_refused(store: PostgresStore) -> None:
    store.add([msg(Q, 1)])
    with pytest.raises(DuplicateMessageError, match="same JMS message id"):
        store.add([msg(Q, 1)])
    store.add([msg("queue://other", 1)])  # another destination may hold the same id
    assert store.count(Q) == 1


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (msg("orders", 1), "must start with"),
        (msg("queue://" + "x" * 250, 1), "at most 250"),
        (msg(Q, 1, priority=10), "outside 0..9"),
        (msg(Q, 1, priority=-1), "outside 0..9"),
        (msg(Q, 1, expiration=-5), "negative"),
        (msg(Q, 1, expiration=2**63), "Java long"),
        (msg(Q, 2**63), "Java long"),
        (msg(Q, -(2**63) - 1), "Java long"),
        (msg("queue://ord\x00ers", 1), "NUL"),
        (msg(Q, 1, producer="ID:host\x00-1:1:1"), "NUL"),
    ],
)
def test_bad_input_is_refused_and_nothing_written(
    store: PostgresStore, message: object, match: str
) -> None:
    with pytest.raises(InvalidMessageError, match=match):
        store.add([msg(Q, 100), message])  # type: ignore[list-item]
    assert store.count(Q) == 0


def test_oversized_message_is_refused(make_store: StoreFactory) -> None:
    store = make_store(max_message_bytes=1024)
    with pytest.raises(InvalidMessageError, match="exceeds the limit"):
        store.add([msg(Q, 1, body=b"x" * 1025)])


def test_a_message_limit_above_what_postgresql_can_read_back_is_refused(engine: Engine) -> None:
    """PostgreSQL hands BYTEA back hex-encoded in one value under 1 GiB: a store taking
    larger bodies would keep messages no page can ever read."""
    with pytest.raises(ConfigError, match="max_message_bytes"):
        PostgresStore(engine, max_message_bytes=600 * 1024 * 1024)
    PostgresStore(engine, max_message_bytes=511 * 1024 * 1024)  # the largest it takes


def test_ids_resume_after_restart_from_msgs_and_acks(
    engine: Engine, make_store: StoreFactory
) -> None:
    store = make_store()
    ids = store.add([msg(Q, 1), msg(Q, 2)])
    store.stop()
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO activemq_acks (container, client_id, sub_name, last_acked_id, "
                "priority) VALUES ('topic://t', 'c', 's', 500, 0)"
            )
        )
    again = make_store()
    assert again.add([msg(Q, 3)]) == [501]
    assert ids[-1] < 501


def test_expiry_sweep_removes_and_records_history(store: PostgresStore, engine: Engine) -> None:
    store.add(
        [
            msg(Q, 1, expiration=1000),
            msg(Q, 2, expiration=0),
            msg(Q, 3, expiration=2000),
            msg(Q, 4, expiration=99_999_999_999_999),
        ]
    )
    peek = store.expire(now_ms=5000, limit=10, remove=False)
    assert _seqs(peek) == [1, 3] and store.count(Q) == 4
    gone = store.expire(now_ms=5000, limit=1)
    assert _seqs(gone) == [1]
    assert _seqs(store.expire(now_ms=5000, limit=10)) == [3]
    assert _seqs(store.page(Q, None, 10)) == [2, 4]
    with engine.connect() as conn:
        outcomes = conn.execute(
            sa.text("SELECT msgid_seq, outcome FROM mqstore_history ORDER BY hist_id")
        ).all()
    assert outcomes == [(1, "expired"), (3, "expired")]


def test_history_records_removals_with_outcome(store: PostgresStore, engine: Engine) -> None:
    ids = store.add([msg(Q, 1), msg(Q, 2), msg(Q, 3)])
    store.remove(Q, [ids[0]])
    store.commit(Batch(removes=[Removal(Q, ids[1], Outcome.DEAD_LETTERED)]))
    store.purge(Q)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT id, container, outcome FROM mqstore_history ORDER BY hist_id")
        ).all()
    assert rows == [
        (ids[0], Q, "acknowledged"),
        (ids[1], Q, "dead-lettered"),
        (ids[2], Q, "purged"),
    ]


def test_start_refuses_a_database_behind_the_schema(empty_engine: Engine) -> None:
    store = PostgresStore(empty_engine)
    with pytest.raises(SchemaVersionError, match="mqstore db upgrade"):
        store.start()


def test_a_commit_the_server_cancelled_says_nothing_was_written(dsn: str, engine: Engine) -> None:
    """A statement_timeout cancels the one-statement commit: the server rolled it back, so
    the caller may retry without fearing a duplicate."""
    timed = make_url(dsn).update_query_dict({"options": "-cstatement_timeout=300"})
    quick = create_engine(timed.render_as_string(hide_password=False))
    store = PostgresStore(quick, cleanup_interval_s=0)
    store.start()
    try:
        with engine.begin() as conn:  # the table is locked until the commit is cancelled
            conn.execute(sa.text("LOCK TABLE activemq_msgs IN ACCESS EXCLUSIVE MODE"))
            with pytest.raises(DatabaseUnavailableError) as refused:
                store.add([msg(Q, 1)])
        said = str(refused.value)
        assert "nothing of the batch was written" in said and "may or may not" not in said
        assert store.count(Q) == 0
        assert store.add([msg(Q, 1)])  # and the retry stores it once
        assert store.count(Q) == 1
    finally:
        store.stop()
        quick.dispose()


def test_a_connection_lost_during_the_commit_does_not_claim_nothing_was_committed(
    store: PostgresStore, engine: Engine
) -> None:
    """The server may have committed before the connection ended: saying "nothing was
    committed" would make a caller (an XA transaction manager) act on a falsehood."""
    [kept] = store.add([msg(Q, 1)])
    with engine.begin() as conn:  # the session ends itself when its transaction commits
        conn.execute(
            sa.text(
                "CREATE FUNCTION end_session() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$"
            )
        )
        conn.execute(
            sa.text(
                "CREATE CONSTRAINT TRIGGER end_at_commit AFTER UPDATE ON activemq_msgs "
                "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION end_session()"
            )
        )
    with pytest.raises(CommitOutcomeUnknownError, match="may or may not have been committed"):
        store.update(Q, kept, b"rewritten")
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TRIGGER end_at_commit ON activemq_msgs"))
    store.update(Q, kept, b"rewritten")  # the store goes on
    assert store.get(kept).msg == b"rewritten"  # type: ignore[union-attr]
