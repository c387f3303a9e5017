"""The store's SQL, built once per table prefix; each statement documented in one line.

Like ActiveMQ's ``Statements``: every query the PostgreSQL store runs is named here, so the
SQL can be reviewed (and EXPLAINed in tests) in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache

import sqlalchemy as sa
from sqlalchemy.sql.elements import TextClause

from mqstore.schema import StoreSchema, build_schema


@dataclass(frozen=True)
class Statements:
    """Named statements for one prefix (parameters are ``:name`` binds)."""

    schema: StoreSchema
    #: Insert one row (ActiveMQ's INSERT); kept for single-row callers.
    insert_msg: sa.Insert
    #: Insert many rows as one statement from parallel arrays (:ids, :containers, ...).
    insert_msgs: TextClause
    #: Delete (container, id, outcome) triples; visible rows only; returns deleted rows.
    delete_msgs: TextClause
    #: The same deletion, also recording each removed row in the history table.
    delete_msgs_with_history: TextClause
    #: History rows of messages never written to MSGS, from parallel arrays (:ids, ...).
    insert_history: TextClause
    #: One page of a destination in delivery order after (-priority, id), below an ID bound.
    page_queue: TextClause
    #: One page of a subscription's pending messages (after its position: see
    #: :func:`statements_for`).
    page_subscription: TextClause
    #: Visible messages of a destination.
    count_queue: TextClause
    #: Pending messages of one subscription.
    count_subscription: TextClause
    #: (container, client, sub, selector, pending messages) of every subscription (stats).
    count_all_subscriptions: TextClause
    #: Advance LAST_ACKED_ID of each (container, client, sub, priority) in the arrays
    #: :containers, :clients, :subs, :priorities to :ids, never backwards (plain mode: every
    #: row of the subscription, as ActiveMQ's ack without PRIORITY).
    ack_subscription: TextClause
    #: Up to :limit (ID, container) of topic messages every subscription has acknowledged
    #: (per priority when prioritized); no bodies, which a cleanup never needs.
    cleanup_candidates: TextClause
    #: Visible topic message IDs with no subscription left at all (prepared rows stay).
    orphan_topic_ids: TextClause
    #: Expired visible messages by (EXPIRATION, ID), at most :limit, bounded by :max_bytes
    #: as a page is: see :func:`bytes_bounded_expiry`.
    expired: TextClause
    #: ``expired``, locking its :limit candidate rows first and skipping rows a removal holds.
    expired_locked: TextClause
    #: ActiveMQ's start-up sequence: max(MAX(ID), MAX(LAST_ACKED_ID)).
    last_sequence: TextClause
    #: Every destination with messages or subscriptions.
    destinations: TextClause
    #: Delete up to :limit history rows removed before :before with hist_id <= :upto,
    #: skipping rows another trim holds; returns the count.
    trim_history: TextClause
    #: How many history rows ``trim_history`` would delete in all (ignores :limit).
    count_trimmable_history: TextClause
    #: Mark the visible rows (container, id) in :ids, :containers with the XID :xid (an XA
    #: prepared removal); returns the (id, container) of the rows marked.
    xa_mark_removals: TextClause
    #: Move prepared rows :old_ids to :new_ids and make them visible (an XA commit's adds).
    xa_move_adds: TextClause
    #: Clear the XID of the rows :ids (an XA commit's removals, a rollback's adds and removals).
    xa_clear_xids: TextClause


class Rows(IntEnum):
    """How many rows a part of a statement takes: one row binds scalars (``VALUES``), many
    bind parallel arrays (``unnest``). The one-row form costs the driver and the server about
    a third less, and it is what a producer waiting for each receipt pays."""

    NONE = 0
    ONE = 1
    MANY = 2

    @classmethod
    def of(cls, count: int) -> Rows:
        return cls(min(count, 2))


def _row_source(columns: str, rows: Rows = Rows.MANY) -> str:
    """A row source over parameters given as ``"name type, name type, ..."``: ``unnest`` of
    parallel arrays, or with ``Rows.ONE`` a one-row ``VALUES`` of scalars."""
    pairs = [column.split() for column in columns.split(",")]
    if rows is Rows.ONE:
        return "(VALUES (" + ", ".join(f"CAST(:{name} AS {kind})" for name, kind in pairs) + "))"
    return "unnest(" + ", ".join(f"CAST(:{name} AS {kind}[])" for name, kind in pairs) + ")"


def _insert_msgs(msgs: str, rows: Rows = Rows.MANY) -> str:
    """INSERT of MSGS rows from parallel arrays :ids, :containers, ... :xids."""
    return (
        f"INSERT INTO {msgs} (id, container, msgid_prod, msgid_seq, expiration, priority, msg, "
        "xid) SELECT * FROM "
        + _row_source(
            "ids bigint, containers text, prods text, seqs bigint, expirations bigint, "
            "priorities bigint, msgs bytea, xids text",
            rows,
        )
    )


def _removal_ctes(msgs: str, param: str, cond: str = "", rows: Rows = Rows.MANY) -> list[str]:
    """CTEs ``r`` (the (container, id, outcome) triples in ``:{param}ids`` ...) and ``d`` (the
    visible rows they name, deleted and returned); ``cond`` is extra SQL for d's WHERE."""
    return [
        "r AS (SELECT * FROM "
        + _row_source(f"{param}ids bigint, {param}containers text, {param}outcomes text", rows)
        + " AS r(id, container, outcome))",
        f"d AS (DELETE FROM {msgs} m USING r WHERE m.id = r.id AND m.container = r.container "
        # Not `m.xid IS NULL`: on a table not yet analyzed the planner takes that for a few
        # rows found by _xidx and scans every visible row instead of probing the primary key.
        f"AND coalesce(m.xid, '') = ''{cond} RETURNING m.id, m.container, m.msgid_prod, "
        "m.msgid_seq, m.priority, m.expiration, m.msg, r.outcome)",
    ]


def _history_of_removed(history: str) -> str:
    """INSERT of a history row for every row CTE ``d`` deleted (bodies when :keep_body)."""
    return (
        f"INSERT INTO {history} (id, container, msgid_prod, msgid_seq, priority, expiration, "
        "removed_at, outcome, msg) SELECT id, container, msgid_prod, msgid_seq, priority, "
        "expiration, :now, outcome, CASE WHEN :keep_body THEN msg END FROM d"
    )


#: ACKS rows of durable subscriptions have PRIORITY below this (11 marks a virtual-topic
#: consumer queue).
SUB_PRIORITIES = 10


def _ack_update(
    acks: str, param: str, cond: str = "", rows: Rows = Rows.MANY, prioritized: bool = False
) -> str:
    """UPDATE advancing LAST_ACKED_ID, never backwards, for the (container, client, sub,
    priority, id) rows in ``:{param}containers`` ... ``:{param}ids``; ``cond`` is extra SQL
    for its WHERE. Plain mode updates every row of the subscription whatever its PRIORITY,
    as ActiveMQ's ack without ``AND PRIORITY=?`` does (its position is their least)."""
    priority = "t.priority = k.priority" if prioritized else f"t.priority < {SUB_PRIORITIES}"
    return (
        f"UPDATE {acks} t SET last_acked_id = k.id, xid = NULL FROM "
        + _row_source(
            f"{param}containers text, {param}clients text, {param}subs text, "
            f"{param}priorities bigint, {param}ids bigint",
            rows,
        )
        + " AS k(container, client_id, sub_name, priority, id) "
        "WHERE t.container = k.container AND t.client_id = k.client_id "
        f"AND t.sub_name = k.sub_name AND {priority} "
        f"AND (t.last_acked_id IS NULL OR t.last_acked_id < k.id){cond}"
    )


#: True while the row lock's session ``:lock_xact`` (its transaction's xid8) lives.
LOCK_SESSION_ALIVE = "pg_xact_status(CAST(:lock_xact AS xid8)) = 'in progress'"


@dataclass(frozen=True)
class CommitShape:
    """What a store commit holds, which picks its statement (each planned for what it does)."""

    fenced: bool
    history: bool
    adds: Rows
    removes: Rows
    acks: Rows
    #: Fenced by the lock session's transaction (the row lock) instead of the lock row.
    session_fence: bool = False
    #: Acks update the row of their PRIORITY only (prioritizedMessages), else every row.
    prioritized: bool = False


@lru_cache(maxsize=256)
def commit_batch(prefix: str, shape: CommitShape) -> TextClause:
    """One statement that commits a whole batch, so a commit costs one round trip.

    Run in autocommit it is its own transaction. When ``fenced`` it reads the lock row FOR
    SHARE first and writes only while ``BROKER_NAME = :holder``: a takeover's UPDATE waits
    for it, and it returns the holder it found so the caller can tell it was deposed. With
    ``session_fence`` (the row lock, held FOR NO KEY UPDATE by another session of the same
    broker) it writes only while that session's transaction ``:lock_xact`` is in progress,
    holding the lock row FOR KEY SHARE NOWAIT: a new master's FOR UPDATE waits for it, and
    one that holds the row already makes it fail with SQLSTATE 55P03. The
    removal waits for the insert (it reads its count), so adds come first as in a
    transaction: re-adding the JMS id of a message the batch removes is a duplicate.
    Parameters are those of ``insert_msgs`` for the adds, ``:rm_*`` for the removals,
    ``:ack_*`` for the acks: parallel arrays, or scalars for a part of ``Rows.ONE``. Returns
    one row (holder found or NULL, rows removed).
    """
    schema = build_schema(prefix)
    m, a, h = schema.msgs.name, schema.acks.name, schema.history.name
    guard = " AND EXISTS (SELECT 1 FROM f WHERE f.broker_name = :holder)" if shape.fenced else ""
    ctes = []
    if shape.fenced and shape.session_fence:
        alive = (
            f"SELECT CAST(:holder AS text) AS broker_name FROM {schema.lock.name} "
            f"WHERE id = 1 AND {LOCK_SESSION_ALIVE} FOR KEY SHARE NOWAIT"
        )
        ctes.append(f"f AS ({alive})")
    elif shape.fenced:
        ctes.append(f"f AS (SELECT broker_name FROM {schema.lock.name} WHERE id = 1 FOR SHARE)")
    if shape.adds:
        ctes.append(f"i AS ({_insert_msgs(m, shape.adds)} AS u WHERE true{guard} RETURNING 1)")
    if shape.removes:
        after_adds = " AND (SELECT count(*) FROM i) >= 0" if shape.adds else ""
        ctes += _removal_ctes(m, "rm_", guard + after_adds, shape.removes)
        if shape.history:
            ctes.append(f"hi AS ({_history_of_removed(h)})")
    if shape.acks:
        ctes.append(f"k AS ({_ack_update(a, 'ack_', guard, shape.acks, shape.prioritized)})")
    found = "(SELECT broker_name FROM f)" if shape.fenced else "CAST(NULL AS text)"
    removed = "(SELECT count(*) FROM d)" if shape.removes else "0"
    return sa.text(f"WITH {', '.join(ctes)} SELECT {found}, {removed}")


PAGE_COLUMNS = "id, container, msgid_prod, msgid_seq, expiration, priority, msg, xid"


def bytes_bounded_page(source: str) -> str:
    """A page query over ``source`` (``FROM ... m ... WHERE ...``): at most ``:limit`` rows
    in delivery order, and of those only the rows whose predecessors' MSG bytes stay below
    ``:max_bytes`` (a running sum over the same index range scan: rows past the bound are
    never sent, and ``octet_length`` reads no out-of-line body)."""
    cols = ", ".join(f"m.{c}" for c in PAGE_COLUMNS.split(", "))
    return (
        f"SELECT {PAGE_COLUMNS} FROM (SELECT {cols}, - m.priority AS neg_priority, "
        "sum(coalesce(octet_length(m.msg), 0)) "
        "OVER (ORDER BY - m.priority, m.id ROWS UNBOUNDED PRECEDING) "
        "- coalesce(octet_length(m.msg), 0) AS bytes_before "
        + source
        + "ORDER BY - m.priority, m.id LIMIT :limit) p "
        "WHERE bytes_before < :max_bytes ORDER BY neg_priority, id"
    )


#: The plain-mode keyset of a cursor (:neg_priority, :after_id): in an order where every row
#: has priority 0, a cursor of another priority (the first one, (10, 0)) is before them all.
PLAIN_AFTER = "m.id > (CASE WHEN :neg_priority = 0 THEN :after_id ELSE 0 END)"


def id_ordered_page(msgs: str, where: str, ctes: str = "") -> str:
    """A page query of the rows of ``msgs`` (as ``m``) matching ``where`` in ID order,
    bounded as :func:`bytes_bounded_page`, each row's PRIORITY given as 0: the order and
    cursor of a plain store's durable subscription (ActiveMQ's ``ORDER BY M.ID``), in which
    a row ActiveMQ stored with a priority sorts by its ID alone. ``ctes`` (``name AS
    (...), ...``) precede it.

    One ``_cpidx`` range scan per priority 0..9, merged in ID order: no index orders a
    destination's rows by ID alone."""
    cols = ", ".join(f"m.{c}" for c in PAGE_COLUMNS.split(", "))
    lanes = " UNION ALL ".join(
        f"(SELECT {cols} FROM {msgs} m WHERE (- m.priority) = {-p} AND {where} "
        "ORDER BY m.id LIMIT :limit)"
        for p in range(SUB_PRIORITIES)
    )
    shown = PAGE_COLUMNS.replace("priority", "0 AS priority")
    return (
        (f"WITH {ctes} " if ctes else "")
        + f"SELECT {shown} FROM (SELECT u.*, sum(coalesce(octet_length(u.msg), 0)) "
        "OVER (ORDER BY u.id ROWS UNBOUNDED PRECEDING) - coalesce(octet_length(u.msg), 0) "
        f"AS bytes_before FROM ({lanes}) u ORDER BY u.id LIMIT :limit) p "
        "WHERE bytes_before < :max_bytes ORDER BY id"
    )


def bytes_bounded_expiry(source: str, *, locked: bool = False, candidates: bool = False) -> str:
    """An expiry query over ``source`` (``FROM ... m WHERE ...``): of the first ``:limit``
    rows by (EXPIRATION, ID), those whose predecessors' MSG bytes stay below ``:max_bytes``,
    as a page is bounded (:func:`bytes_bounded_page`: the first row always). The sizes come
    from ``octet_length``, which reads no out-of-line body, so bodies of rows past the bound
    are never read. ``locked`` locks the ``:limit`` rows first, skipping rows a removal holds;
    ``candidates`` adds a last column, how many of those rows there were."""
    cols = ", ".join(f"m.{c}" for c in PAGE_COLUMNS.split(", "))
    lock = " FOR UPDATE OF m SKIP LOCKED" if locked else ""
    extra = ", candidates" if candidates else ""
    return (
        f"SELECT {PAGE_COLUMNS}{extra} FROM (SELECT c.*, "
        "sum(coalesce(octet_length(c.msg), 0)) OVER w - coalesce(octet_length(c.msg), 0) "
        "AS bytes_before"
        + (", count(*) OVER () AS candidates" if candidates else "")
        + f" FROM (SELECT {cols} "
        + source
        + f"ORDER BY m.expiration, m.id LIMIT :limit{lock}) c "
        "WINDOW w AS (ORDER BY c.expiration, c.id ROWS UNBOUNDED PRECEDING)) e "
        "WHERE e.bytes_before < :max_bytes ORDER BY expiration, id"
    )


def _pending(msgs: str, acks: str, prioritized: bool) -> str:
    """``FROM ... WHERE ...`` of the messages subscription (:container, :client_id,
    :sub_name) has not acknowledged.

    Prioritized, as ActiveMQ's by-priority statements: a message of PRIORITY p after the
    LAST_ACKED_ID of the subscription's row of PRIORITY p. Plain, as ActiveMQ's other
    statements (no PRIORITY filter): every message after the least LAST_ACKED_ID of its rows,
    so a message ActiveMQ stored with a priority (prioritizedMessages) is delivered too.
    """
    if prioritized:
        return (
            f"FROM {msgs} m JOIN {acks} d ON m.container = d.container "
            "AND m.priority = d.priority WHERE d.container = :container "
            "AND d.client_id = :client_id AND d.sub_name = :sub_name AND m.xid IS NULL "
            "AND m.id > d.last_acked_id "
        )
    # A join, as the prioritized form: a scalar subquery would make ``m.id > $0`` an index
    # range on the primary key, read in ID order and then sorted into delivery order.
    return (
        f"FROM {msgs} m JOIN ({_plain_position(acks)}) d ON m.id > d.last_acked_id "
        "WHERE m.container = :container AND m.xid IS NULL "
    )


def _plain_position(acks: str) -> str:
    """The position of subscription (:container, :client_id, :sub_name) in a plain store:
    the least LAST_ACKED_ID of its rows (``last_acked_id``)."""
    return (
        f"SELECT min(last_acked_id) AS last_acked_id FROM {acks} WHERE container = :container "
        "AND client_id = :client_id AND sub_name = :sub_name "
        f"AND priority < {SUB_PRIORITIES}"
    )


def _page_subscription(msgs: str, acks: str, pending: str, prioritized: bool) -> str:
    """One page of a subscription's pending messages after the cursor (:neg_priority,
    :after_id): prioritized, in (-PRIORITY, ID) order; plain, in ID order with every PRIORITY
    given as 0 (:func:`id_ordered_page`), so the cursor and the acks of the rows delivered
    never pass a message not yet delivered."""
    if prioritized:
        return bytes_bounded_page(
            pending + "AND m.id < :bound AND (- m.priority, m.id) > (:neg_priority, :after_id) "
        )
    return id_ordered_page(
        msgs,
        f"m.container = :container AND m.xid IS NULL AND m.id < :bound AND {PLAIN_AFTER} "
        "AND m.id > (SELECT last_acked_id FROM d)",
        f"d AS ({_plain_position(acks)})",
    )


def _count_all_subscriptions(msgs: str, acks: str, prioritized: bool) -> str:
    """(container, client, sub, selector, pending) of every durable subscription, pending
    as ``_pending`` counts it."""
    if prioritized:
        return (
            "SELECT d.container, d.client_id, d.sub_name, max(d.selector), count(m.id) "
            f"FROM {acks} d LEFT JOIN {msgs} m ON m.container = d.container "
            "AND m.priority = d.priority AND m.id > d.last_acked_id AND m.xid IS NULL "
            f"WHERE d.container LIKE 'topic://%' AND d.priority < {SUB_PRIORITIES} "
            "GROUP BY d.container, d.client_id, d.sub_name"
        )
    return (
        "SELECT d.container, d.client_id, d.sub_name, d.selector, count(m.id) FROM (SELECT "
        "container, client_id, sub_name, max(selector) AS selector, min(last_acked_id) AS "
        f"last_acked_id FROM {acks} "
        f"WHERE container LIKE 'topic://%' AND priority < {SUB_PRIORITIES} "
        f"GROUP BY container, client_id, sub_name) d LEFT JOIN {msgs} m "
        "ON m.container = d.container AND m.id > d.last_acked_id AND m.xid IS NULL "
        "GROUP BY d.container, d.client_id, d.sub_name, d.selector"
    )


def _cleanup_candidates(msgs: str, acks: str, prioritized: bool) -> str:
    """Up to :limit (ID, container) of topic messages no subscription still needs, as
    ``_pending`` delivers them (a plain store's subscriptions receive every PRIORITY)."""
    subs = f"FROM {acks} WHERE container LIKE 'topic://%' AND priority < {SUB_PRIORITIES}"
    if prioritized:
        return (
            "SELECT m.id, m.container FROM (SELECT container, priority, "
            f"min(last_acked_id) AS upto {subs} GROUP BY container, priority) s "
            f"JOIN {msgs} m ON m.container = s.container AND (- m.priority) = (- s.priority) "
            "AND m.id <= s.upto WHERE m.xid IS NULL LIMIT :limit"
        )
    # Each priority apart, as above: a range scan of _cpidx per priority up to the bound.
    return (
        f"SELECT m.id, m.container FROM (SELECT container, min(last_acked_id) AS upto {subs} "
        "GROUP BY container) s CROSS JOIN generate_series(0, 9) AS p(priority) "
        f"JOIN {msgs} m ON m.container = s.container AND (- m.priority) = (- p.priority) "
        "AND m.id <= s.upto WHERE m.xid IS NULL LIMIT :limit"
    )


@lru_cache(maxsize=16)
def statements_for(prefix: str = "", prioritized: bool = False) -> Statements:
    """Build (once) the statements for ``prefix``, for a store with or without
    prioritizedMessages (which changes how durable subscriptions read, ack and clean up)."""
    schema = build_schema(prefix)
    m, a, h = schema.msgs.name, schema.acks.name, schema.history.name
    removal = f"WITH {', '.join(_removal_ctes(m, ''))} "
    trimmable = "removed_at < :before AND hist_id <= :upto"
    expired = f"FROM {m} m WHERE m.expiration > 0 AND m.expiration < :now AND m.xid IS NULL "
    pending = _pending(m, a, prioritized)
    return Statements(
        schema=schema,
        insert_msg=sa.insert(schema.msgs),
        insert_msgs=sa.text(_insert_msgs(m)),
        delete_msgs=sa.text(removal + "SELECT count(*) FROM d"),
        delete_msgs_with_history=sa.text(removal + _history_of_removed(h)),
        insert_history=sa.text(
            f"INSERT INTO {h} (id, container, msgid_prod, msgid_seq, priority, expiration, "
            "removed_at, outcome, msg) SELECT * FROM "
            + _row_source(
                "ids bigint, containers text, prods text, seqs bigint, priorities bigint, "
                "expirations bigint, removed bigint, outcomes text, msgs bytea"
            )
        ),
        page_queue=sa.text(
            bytes_bounded_page(
                f"FROM {m} m WHERE m.container = :container AND m.xid IS NULL "
                "AND m.id < :bound AND (- m.priority, m.id) > (:neg_priority, :after_id) "
            )
        ),
        page_subscription=sa.text(_page_subscription(m, a, pending, prioritized)),
        count_queue=sa.text(
            f"SELECT count(*) FROM {m} WHERE container = :container AND xid IS NULL"
        ),
        count_subscription=sa.text("SELECT count(*) " + pending),
        count_all_subscriptions=sa.text(_count_all_subscriptions(m, a, prioritized)),
        ack_subscription=sa.text(_ack_update(a, "", prioritized=prioritized)),
        cleanup_candidates=sa.text(_cleanup_candidates(m, a, prioritized)),
        orphan_topic_ids=sa.text(
            f"SELECT id FROM {m} WHERE container = :container AND xid IS NULL AND NOT EXISTS "
            f"(SELECT 1 FROM {a} WHERE container = :container) LIMIT :limit"
        ),
        expired=sa.text(bytes_bounded_expiry(expired)),
        expired_locked=sa.text(bytes_bounded_expiry(expired, locked=True)),
        last_sequence=sa.text(
            f"SELECT greatest((SELECT max(id) FROM {m}), (SELECT max(last_acked_id) FROM {a}), 0)"
        ),
        destinations=sa.text(
            f"SELECT DISTINCT container FROM {m} UNION SELECT DISTINCT container FROM {a} "
            "WHERE priority < 11"
        ),
        trim_history=sa.text(
            f"WITH t AS (SELECT hist_id FROM {h} WHERE {trimmable} LIMIT :limit "
            f"FOR UPDATE SKIP LOCKED), d AS (DELETE FROM {h} h USING t "
            "WHERE h.hist_id = t.hist_id RETURNING 1) SELECT count(*) FROM d"
        ),
        count_trimmable_history=sa.text(f"SELECT count(*) FROM {h} WHERE {trimmable}"),
        xa_mark_removals=sa.text(
            f"UPDATE {m} m SET xid = :xid FROM (SELECT DISTINCT * FROM "
            + _row_source("ids bigint, containers text")
            + " AS u(id, container)) r WHERE m.id = r.id AND m.container = r.container "
            # coalesce: see _removal_ctes (a probe of the primary key, never of _xidx).
            "AND coalesce(m.xid, '') = '' RETURNING m.id, m.container"
        ),
        xa_move_adds=sa.text(
            f"UPDATE {m} m SET xid = NULL, id = n.new_id FROM "
            + _row_source("old_ids bigint, new_ids bigint")
            + " AS n(old_id, new_id) WHERE m.id = n.old_id"
        ),
        xa_clear_xids=sa.text(f"UPDATE {m} SET xid = NULL WHERE id = ANY(CAST(:ids AS bigint[]))"),
    )
