"""XA recovery of tables holding a row whose XID is not ActiveMQ's encoding of prepared work.

Recover refuses with an error naming the row (a transaction manager takes the list it gets
for complete) and changes nothing; once the row is fixed, the prepared work is listed.
"""

from __future__ import annotations

import base64
import re
import struct

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.errors import TransactionError
from mqstore.store import Ack, Batch, PostgresStore, Removal, SubscriptionKey, Xid
from tests.integration.conftest import msg

Q = "queue://xa-malformed"
T = "topic://xa-malformed"
SUB = SubscriptionKey(T, "client", "sub")
XID = Xid(0x1234, b"global-tx-1", b"branch-7")
OTHER = Xid(7, b"other-tx", b"b")


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


#: XID values no prepare writes, and what the error says of each.
MALFORMED = {
    "empty": ("", "empty (a row outside XA"),
    "not base64": ("not base64!", "not base64 text"),
    "too short": (_b64(b"+" + bytes(8)), "fewer than the 16"),
    "wrong marker": (_b64(b"x" + base64.b64decode(XID.encode("+"))[1:]), "marker byte 0x78"),
    "gtrid past the end": (
        _b64(b"+" + struct.pack(">qbiH", 0, 0, 1, 60) + b"short"),
        "gtrid length of 60 bytes",
    ),
}


def _tables(engine: Engine) -> list[tuple[object, ...]]:
    """Every MSGS and ACKS row, for comparing before and after."""
    with engine.connect() as conn:
        msgs = conn.execute(
            sa.text("SELECT id, container, xid, msg FROM activemq_msgs ORDER BY id")
        ).all()
        acks = conn.execute(
            sa.text(
                "SELECT container, client_id, sub_name, priority, last_acked_id, xid "
                "FROM activemq_acks ORDER BY container, client_id, sub_name, priority"
            )
        ).all()
    return [tuple(r) for r in [*msgs, *acks]]


def _set_xid(engine: Engine, table: str, where: str, xid: str | None, **params: object) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text(f"UPDATE {table} SET xid = :xid WHERE {where}"), {"xid": xid, **params}
        )


def _prepare_work(store: PostgresStore) -> tuple[int, int, int]:
    """XID prepared with an add, a queue removal and a durable ack; returns the IDs of the
    removed queue message, the acked topic message and a plain queue message."""
    store.add_subscription(SUB)
    [queued, plain] = store.add([msg(Q, 1), msg(Q, 2)])
    [topic] = store.add([msg(T, 1)])
    store.xa_prepare(
        XID, Batch(adds=[msg(Q, 3)], removes=[Removal(Q, queued)], acks=[Ack(SUB, topic)])
    )
    return queued, topic, plain


@pytest.mark.parametrize("case", list(MALFORMED))
def test_recover_refuses_naming_a_message_row_with_a_malformed_xid_and_lists_after_the_fix(
    store: PostgresStore, engine: Engine, case: str
) -> None:
    value, reason = MALFORMED[case]
    queued, topic, plain = _prepare_work(store)
    _set_xid(engine, "activemq_msgs", "id = :id", value, id=plain)
    before = _tables(engine)

    with pytest.raises(TransactionError) as refused:
        store.xa_recover()
    text = str(refused.value)
    assert f"activemq_msgs row ID {plain} (CONTAINER '{Q}')" in text
    assert f"XID {value[:40]!r}" in text  # long values are shortened
    assert reason in text
    assert "set its XID to NULL" in text and "delete the row" in text
    assert "1 row(s)" in text
    assert _tables(engine) == before  # nothing discarded, nothing changed

    _set_xid(engine, "activemq_msgs", "id = :id", None, id=plain)
    [prepared] = store.xa_recover()
    assert prepared.xid == XID
    assert [m.msgid_seq for m in prepared.adds] == [3]
    assert [m.id for m in prepared.removes] == [queued]
    assert prepared.acks == (Ack(SUB, topic, 0),)
    assert [m.id for m in store.page(Q, None, 10)] == [plain]  # visible again


def test_recover_refuses_naming_a_subscription_row_with_a_malformed_xid(
    store: PostgresStore, engine: Engine
) -> None:
    _prepare_work(store)
    other = SubscriptionKey(T, "client", "other-sub")
    store.add_subscription(other)
    _set_xid(engine, "activemq_acks", "sub_name = 'other-sub'", "")
    before = _tables(engine)

    with pytest.raises(TransactionError) as refused:
        store.xa_recover()
    text = str(refused.value)
    assert (
        f"activemq_acks row of subscription CONTAINER '{T}', CLIENT_ID 'client', "
        "SUB_NAME 'other-sub', PRIORITY 0: XID '': empty"
    ) in text
    assert _tables(engine) == before

    _set_xid(engine, "activemq_acks", "sub_name = 'other-sub'", None)
    assert [p.xid for p in store.xa_recover()] == [XID]


def test_recover_names_every_malformed_row_and_shortens_long_values(
    store: PostgresStore, engine: Engine
) -> None:
    _prepare_work(store)
    ids = store.add([msg(Q, 10 + i) for i in range(12)])
    long_value = "?" * 200
    _set_xid(engine, "activemq_msgs", "id = ANY(:ids)", long_value, ids=ids)

    with pytest.raises(TransactionError) as refused:
        store.xa_recover()
    text = str(refused.value)
    assert "12 row(s)" in text and "and 2 more" in text
    assert long_value not in text
    assert "... (200 characters)" in text
    assert len(re.findall(r"activemq_msgs row ID \d+", text)) == 10


@pytest.mark.parametrize("finish", ["commit", "rollback"])
def test_another_transaction_finishes_beside_a_row_with_a_malformed_xid(
    store: PostgresStore, engine: Engine, finish: str
) -> None:
    _, _, plain = _prepare_work(store)
    store.xa_prepare(OTHER, Batch(adds=[msg(Q, 20)]))
    _set_xid(engine, "activemq_msgs", "id = :id", "not base64!", id=plain)

    if finish == "commit":
        store.xa_commit(OTHER)
    else:
        store.xa_rollback(OTHER)
    seqs = [m.msgid_seq for m in store.page(Q, None, 10)]
    assert seqs == ([20] if finish == "commit" else [])
    with engine.connect() as conn:
        xid = conn.execute(
            sa.text("SELECT xid FROM activemq_msgs WHERE id = :id"), {"id": plain}
        ).scalar_one()
    assert xid == "not base64!"  # the malformed row is left as it was
    _set_xid(engine, "activemq_msgs", "id = :id", None, id=plain)
    assert [p.xid for p in store.xa_recover()] == [XID]


def test_commit_refuses_a_transaction_with_a_row_of_an_unknown_marker(
    store: PostgresStore, engine: Engine
) -> None:
    queued, _, _ = _prepare_work(store)
    wrong = _b64(b"x" + base64.b64decode(XID.encode("-"))[1:])
    _set_xid(engine, "activemq_msgs", "id = :id", wrong, id=queued)
    before = _tables(engine)

    with pytest.raises(TransactionError) as refused:
        store.xa_commit(XID)
    text = str(refused.value)
    assert f"cannot read the prepared work of XA transaction {XID}" in text
    assert f"activemq_msgs row ID {queued}" in text and "marker byte 0x78" in text
    assert _tables(engine) == before
