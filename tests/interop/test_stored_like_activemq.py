"""The rows mqstore stores for STOMP SENDs are the rows ActiveMQ 5.17's JDBC store writes.

The same persistent SENDs (every header mqstore takes, text and bytes bodies, a transaction,
durable subscriptions with acks) go once to a real ActiveMQ 5.17 on a JDBC store (one broker
for the module, its own database) and once to mqstore's broker on a PostgresStore (no
journal, so rows are written at once, another database). Then ACTIVEMQ_MSGS and
ACTIVEMQ_ACKS of both are read and compared message by message, with the decoded MSG:
everything except what each broker generates for itself (ids, times) must be equal.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from mqstore import openwire
from mqstore.openwire import Message
from mqstore.store.postgres import PostgresStore
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread
from tests.conftest import Databases
from tests.interop.activemq_broker import ActiveMQBroker, ActiveMQConfig
from tests.interop.stomp_client import connect, receive

QUEUE, TOPIC = "/queue/STORED.Q", "/topic/STORED.T"
FUTURE = "4102444800000"  # 2100-01-01

#: (tag, destination, body, headers): persistent SENDs, in order.
SENDS: list[tuple[str, str, bytes, dict[str, str]]] = [
    ("plain", QUEUE, b"plain text", {}),
    ("empty-text", QUEUE, b"", {}),
    ("empty-bytes", QUEUE, b"", {"content-length": "0"}),
    ("binary", QUEUE, b"\x00\x01bin\xff\x00", {"content-length": "7"}),
    (
        "sized-text",
        QUEUE,
        "h\u00e9 \u2713".encode(),
        {"content-length": "7", "amq-msg-type": "text"},
    ),
    ("typed-text", QUEUE, "\U0001f600".encode(), {"amq-msg-type": "text"}),
    ("typed-bytes", QUEUE, b"\x00b", {"content-length": "2", "amq-msg-type": "bytes"}),
    ("unicode-text", QUEUE, "h\u00e9llo \u2713 \U0001f600".encode(), {}),
    ("no-receipt", QUEUE, b"n", {}),
    ("priority", QUEUE, b"p", {"priority": "9"}),
    ("priority-0", QUEUE, b"p0", {"priority": "0"}),
    ("expires", QUEUE, b"e", {"expires": FUTURE}),
    ("jms-fields", QUEUE, b"f", {"correlation-id": "corr-1", "type": "my.type"}),
    ("reply-queue", QUEUE, b"r", {"reply-to": "/queue/REPLIES"}),
    ("reply-topic", QUEUE, b"r", {"reply-to": "/topic/REPLIES"}),
    ("reply-other", QUEUE, b"r", {"reply-to": "somewhere"}),
    ("group", QUEUE, b"g", {"JMSXGroupID": "grp-1", "JMSXGroupSeq": "3"}),
    ("jms-setters", QUEUE, b"s", {"JMSCorrelationID": "c2", "JMSType": "t2", "JMSPriority": "7"}),
    (
        "custom",
        QUEUE,
        b"c",
        {
            "colour": "red",
            "escaped": "a:b\\c\nd",
            "unicode": "h\u00e9 \u2713 \U0001f600",
            "cl\u00e9": "v",
            "empty": "",
            "content-type": "text/plain",
        },
    ),
    ("to-topic", TOPIC, b"t1", {"colour": "red"}),
    ("to-topic-bytes", TOPIC, b"t2\x00", {"content-length": "3"}),
    ("to-topic-3", TOPIC, b"t3", {}),
]
#: Sent inside BEGIN/COMMIT.
TX_SENDS: list[tuple[str, str, bytes, dict[str, str]]] = [
    ("tx-1", QUEUE, b"in tx 1", {}),
    ("tx-2", TOPIC, b"in tx 2", {}),
]
SUBS = (("client-a", "subA"), ("client-b", "subB"))


@dataclass
class Stored:
    """One broker's rows: MSGS by tag (row, decoded MSG) and ACKS by (client, sub)."""

    msgs: dict[str, tuple[dict[str, Any], Message]]
    acks: dict[tuple[str, str], dict[str, Any]]
    started: int
    finished: int


def exercise(port: int) -> None:
    """Durable subscriptions, every SEND, then subA consumes and acks the first 2 of 4."""
    for client, sub in SUBS:
        receive(port, TOPIC, 0, client_id=client, subscription=sub, timeout=0.5, settle=0.1)
    conn, _ = connect(port)
    for i, (tag, dest, body, headers) in enumerate(SENDS):
        hdrs = {"persistent": "true", "tag": tag, **headers}
        if tag != "no-receipt":
            hdrs["receipt"] = f"r{i}"
        conn.send(dest, body, headers=hdrs)
    conn.begin("tx1")
    for tag, dest, body, headers in TX_SENDS:
        hdrs = {"persistent": "true", "tag": tag, "transaction": "tx1", **headers}
        conn.send(dest, body, headers=hdrs)
    conn.commit("tx1")
    conn.disconnect(receipt="done")
    topic_count = sum(1 for _, d, _, _ in SENDS + TX_SENDS if d == TOPIC)
    got = receive(port, TOPIC, topic_count, client_id="client-a", subscription="subA", ack_first=2)
    assert len(got) == topic_count


def read_rows(dsn: str, prefix: str, started: int) -> Stored:
    """The MSGS and ACKS rows of one database."""
    engine = create_engine(dsn)
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, container, msgid_prod, msgid_seq, expiration, msg, priority, xid "
                f"FROM {prefix}activemq_msgs ORDER BY id"
            )
        ).mappings()
        msgs = {}
        by_id = {}
        for row in rows:
            ow = openwire.decode(bytes(row["msg"]))
            tag = str(ow.properties["tag"])
            msgs[tag] = (dict(row), ow)
            by_id[row["id"]] = tag
        acks = {
            (r["client_id"], r["sub_name"]): {**r, "last_acked": by_id.get(r["last_acked_id"])}
            for r in conn.execute(text(f"SELECT * FROM {prefix}activemq_acks")).mappings()
        }
    engine.dispose()
    return Stored(msgs, acks, started, int(time.time() * 1000))


@pytest.fixture(scope="module")
def stored(
    databases: Databases, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Stored]]:
    """What ActiveMQ and mqstore stored for :func:`exercise` (one run of each)."""
    amq_db = databases.create()
    mqs_db = databases.create(template=databases.migrated_template())
    amq_dsn, mqs_dsn = databases.dsn_for(amq_db), databases.dsn_for(mqs_db)
    result = {}
    amq = ActiveMQBroker(ActiveMQConfig(dsn=amq_dsn), tmp_path_factory.mktemp("amq")).start()
    try:
        started = int(time.time() * 1000)
        exercise(amq.cfg.stomp_port)
        result["activemq"] = read_rows(amq_dsn, "", started)
    finally:
        amq.stop()
    engine = create_engine(mqs_dsn)
    store = PostgresStore(engine, cleanup_interval_s=0)
    store.start()
    bt = BrokerThread(store, FAST).start()
    try:
        started = int(time.time() * 1000)
        exercise(bt.port)
        result["mqstore"] = read_rows(mqs_dsn, "", started)
    finally:
        bt.close()
        store.stop()
        engine.dispose()
    yield result
    databases.release(amq_db)
    databases.release(mqs_db)


def comparable(ow: Message) -> dict[str, Any]:
    """What a reader of the row sees, without what each broker generates for itself (ids,
    times, command ids).

    Also left out: the bytes of a text body with a supplementary character (ActiveMQ's STOMP
    stores its raw UTF-8, which ActiveMQ's own ``getText()`` refuses; mqstore stores the
    modified UTF-8 ``ActiveMQTextMessage`` writes, and both decode to the same text), and
    the ``transactionId`` ActiveMQ leaves in a message sent in a transaction (nothing reads
    it back from a stored row; XA prepared sends are told by the XID column)."""
    fields = {
        "kind": ow.kind,
        "properties": dict(ow.properties),
        "property_types": {k: type(v).__name__ for k, v in ow.properties.items()},
        "body": ow.body,
        "compressed": ow.compressed,
        "destination": ow.destination,
        "reply_to": ow.reply_to,
        "correlation_id": ow.correlation_id,
        "type": ow.type,
        "group_id": ow.group_id,
        "group_sequence": ow.group_sequence,
        "persistent": ow.persistent,
        "priority": ow.priority,
        "expiration": ow.expiration,
        "user_id": ow.user_id,
        "original_destination": ow.original_destination,
        "redelivery_counter": ow.redelivery_counter,
        "response_required": ow.response_required,
        "arrival": ow.arrival,
        "broker_out_time": ow.broker_out_time,
        "broker_path": ow.broker_path,
        "cluster": ow.cluster,
        "target_consumer_id": ow.target_consumer_id,
        "text_view": ow.message_id.text_view if ow.message_id else "no id",
        "droppable": ow.droppable,
        "jms_xgroup_first_for_consumer": ow.jms_xgroup_first_for_consumer,
    }
    return fields


TAGS = [tag for tag, *_ in SENDS + TX_SENDS]


def test_every_message_is_stored_by_both(stored: dict[str, Stored]) -> None:
    """Both brokers store one row per SEND, queue and durable topic alike."""
    assert sorted(stored["mqstore"].msgs) == sorted(stored["activemq"].msgs) == sorted(TAGS)


@pytest.mark.parametrize("tag", TAGS)
def test_the_stored_message_reads_as_activemq_wrote_it(stored: dict[str, Stored], tag: str) -> None:
    """The decoded MSG matches ActiveMQ's field by field (ids and times aside)."""
    amq = comparable(stored["activemq"].msgs[tag][1])
    mqs = comparable(stored["mqstore"].msgs[tag][1])
    assert {k: v for k, v in mqs.items() if amq[k] != v} == {
        k: v for k, v in amq.items() if mqs[k] != v
    }


@pytest.mark.parametrize("tag", TAGS)
def test_the_row_columns_are_activemq_s(stored: dict[str, Stored], tag: str) -> None:
    """CONTAINER, PRIORITY, EXPIRATION and XID as ActiveMQ's; MSGID_PROD / MSGID_SEQ name the
    message id stored in MSG."""
    cols = ("container", "priority", "expiration", "xid")
    amq_row, amq_ow = stored["activemq"].msgs[tag]
    mqs_row, mqs_ow = stored["mqstore"].msgs[tag]
    assert {c: mqs_row[c] for c in cols} == {c: amq_row[c] for c in cols}
    for row, ow in ((amq_row, amq_ow), (mqs_row, mqs_ow)):
        assert (row["msgid_prod"], row["msgid_seq"]) == (ow.msgid_prod, ow.msgid_seq)
        assert ow.producer_id is not None and str(ow.producer_id) == row["msgid_prod"]
        assert re.fullmatch(r"ID:.+:-?\d+:\d+", row["msgid_prod"])


@pytest.mark.parametrize("broker", ["activemq", "mqstore"])
def test_times_and_ids_are_plausible(stored: dict[str, Stored], broker: str) -> None:
    """Timestamps and broker-in times fall within the run; producer sequence ids count up
    from 1 per producer."""
    run = stored[broker]
    for tag in TAGS:
        ow = run.msgs[tag][1]
        assert run.started <= ow.timestamp <= run.finished, tag
        assert run.started <= ow.broker_in_time <= run.finished, tag
    seqs = [run.msgs[tag][1].msgid_seq for tag, *_ in SENDS]
    assert seqs == list(range(1, len(SENDS) + 1))


def test_the_durable_subscription_rows_are_activemq_s(stored: dict[str, Stored]) -> None:
    """Each durable subscription has ActiveMQ's ACKS row: destination, no selector, the
    message it last acked, priority."""
    cols = ("container", "sub_dest", "client_id", "sub_name", "selector", "priority", "last_acked")
    amq, mqs = stored["activemq"].acks, stored["mqstore"].acks
    assert sorted(mqs) == sorted(amq) == sorted(SUBS)
    assert mqs[SUBS[0]]["last_acked"] == "to-topic-bytes"  # subA acked the first two
    for key in SUBS:
        assert {c: mqs[key][c] for c in cols} == {c: amq[key][c] for c in cols}, key
