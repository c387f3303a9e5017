"""The store's paging SQL stays an index range scan on deep destinations (reference §12 #6),
and its commits remove by ID.

Before ActiveMQ 5.15.12 the paging query sorted whole queues; here each page must be one
range scan of ``activemq_msgs_cpidx`` positioned by the ``(-priority, id)`` row comparison,
with no Sort node, whether the cursor is at the start or deep in the queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.db import create_engine
from mqstore.statements import CommitShape, Rows, commit_batch, statements_for
from tests.conftest import Databases

SQL = statements_for("")
PLAIN = statements_for("", prioritized=False)
DEPTH = 200_000
NO_BOUND = 2**63 - 1
CPIDX = "activemq_msgs_cpidx"


@pytest.fixture(scope="module")
def deep(databases: Databases) -> Iterator[Engine]:
    """200 000 prioritized rows in one queue, 20 000 in another, 200 000 in a durable topic
    whose one subscription acknowledged the first 20 000."""
    eng = create_engine(databases.dsn_for(databases.create(template=databases.migrated_template())))
    insert = (
        "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, "
        "priority, msg) SELECT g, :container, 'ID:p-1:1:1', g, 0, {priority}, '\\x00'::bytea "
        "FROM generate_series(:first, :last) g"
    )
    with eng.begin() as conn:
        conn.execute(
            sa.text(insert.format(priority="g % 10")),
            {"container": "queue://deep", "first": 1, "last": DEPTH},
        )
        conn.execute(
            sa.text(insert.format(priority="0")),
            {"container": "queue://other", "first": DEPTH + 1, "last": DEPTH + 20_000},
        )
        conn.execute(
            sa.text(insert.format(priority="0")),
            {"container": "topic://deep", "first": DEPTH + 20_001, "last": 2 * DEPTH + 20_000},
        )
        conn.execute(
            sa.text(
                "INSERT INTO activemq_acks (container, client_id, sub_name, sub_dest, "
                "last_acked_id, priority) VALUES ('topic://deep', 'c', 's', 'topic://deep', "
                ":last_acked, 0)"
            ),
            {"last_acked": DEPTH + 40_000},  # the first 20 000 acked, not yet cleaned up
        )
    with eng.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE"))
    yield eng
    eng.dispose()


def _plan(engine: Engine, stmt: sa.TextClause, params: dict[str, Any]) -> dict[str, Any]:
    with engine.connect() as conn:
        doc = conn.execute(sa.text("EXPLAIN (FORMAT JSON) " + stmt.text), params).scalar_one()
    plan: dict[str, Any] = doc[0]["Plan"]
    return plan


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _assert_range_scan(plan: dict[str, Any]) -> None:
    nodes = list(_nodes(plan))
    kinds = [n["Node Type"] for n in nodes]
    assert "Sort" not in kinds and "Incremental Sort" not in kinds, kinds
    assert "Limit" in kinds, kinds  # under the byte bound's filter
    [scan] = [n for n in nodes if n.get("Relation Name") == "activemq_msgs"]
    assert scan["Node Type"] == "Index Scan", scan
    assert scan["Index Name"] == CPIDX
    cond = scan["Index Cond"]
    assert "ROW((- priority), id) > ROW(" in cond, cond
    assert "container" in cond


def _page_params(neg_priority: int, after_id: int) -> dict[str, Any]:
    return {
        "container": "queue://deep",
        "bound": NO_BOUND,
        "neg_priority": neg_priority,
        "after_id": after_id,
        "limit": 200,
        "max_bytes": 1 << 20,
    }


@pytest.mark.parametrize(
    ("neg_priority", "after_id"),
    [(-10, 0), (-9, 150_009), (-4, 120_004), (0, 199_990)],
    ids=["first-page", "deep-p9", "deep-p4", "deep-p0"],
)
def test_queue_page_is_one_range_scan(deep: Engine, neg_priority: int, after_id: int) -> None:
    _assert_range_scan(_plan(deep, SQL.page_queue, _page_params(neg_priority, after_id)))


def test_queue_page_below_an_id_bound_is_one_range_scan(deep: Engine) -> None:
    params = {**_page_params(-5, 100_005), "bound": 150_000}
    _assert_range_scan(_plan(deep, SQL.page_queue, params))


def _subscription_params(after_id: int) -> dict[str, Any]:
    return {
        "container": "topic://deep",
        "client_id": "c",
        "sub_name": "s",
        "bound": NO_BOUND,
        "neg_priority": -10 if after_id == 0 else 0,
        "after_id": after_id,
        "limit": 200,
        "max_bytes": 1 << 20,
    }


@pytest.mark.parametrize(("after_id"), [0, DEPTH + 20_000 + 190_000], ids=["first", "deep"])
def test_subscription_page_is_one_range_scan(deep: Engine, after_id: int) -> None:
    sql = statements_for("", prioritized=True)
    _assert_range_scan(_plan(deep, sql.page_subscription, _subscription_params(after_id)))


@pytest.mark.parametrize(("after_id"), [0, DEPTH + 20_000 + 190_000], ids=["first", "deep"])
def test_plain_subscription_page_merges_one_range_scan_per_priority_in_id_order(
    deep: Engine, after_id: int
) -> None:
    # Plain mode delivers in ID order, whatever PRIORITY ActiveMQ stored: the ten
    # priorities' _cpidx ranges, each read in ID order from the position, merged.
    nodes = list(_nodes(_plan(deep, PLAIN.page_subscription, _subscription_params(after_id))))
    kinds = [n["Node Type"] for n in nodes]
    assert "Sort" not in kinds and "Incremental Sort" not in kinds, kinds
    assert "Merge Append" in kinds, kinds
    scans = [n for n in nodes if n.get("Relation Name") == "activemq_msgs"]
    assert len(scans) == 10, scans
    for scan in scans:
        assert scan["Node Type"] == "Index Scan", scan
        assert scan["Index Name"] == CPIDX
        cond = scan["Index Cond"]
        assert "container" in cond and "(- priority) =" in cond and "id >" in cond, cond


def test_plain_subscription_page_gives_the_rows_in_id_order(deep: Engine) -> None:
    with deep.connect() as conn:
        first = conn.execute(PLAIN.page_subscription, _subscription_params(0)).all()
        assert [r[0] for r in first] == list(range(DEPTH + 40_001, DEPTH + 40_201))
        assert {r.priority for r in first} == {0}
        params = _subscription_params(2 * DEPTH + 19_990)
        deep_page = conn.execute(PLAIN.page_subscription, params).all()
        assert [r[0] for r in deep_page] == list(range(2 * DEPTH + 19_991, 2 * DEPTH + 20_001))


def test_counts_use_indexes_without_sorting(deep: Engine) -> None:
    # ActiveMQ's _cidx (container) is deduplicated and ten times smaller than _cpidx, so
    # PostgreSQL rightly counts a destination from it; what matters is no sequential scan.
    for stmt, params in [
        (SQL.count_queue, {"container": "queue://deep"}),
        (SQL.count_queue, {"container": "queue://other"}),
        (SQL.count_subscription, {"container": "topic://deep", "client_id": "c", "sub_name": "s"}),
    ]:
        nodes = list(_nodes(_plan(deep, stmt, params)))
        scans = [n for n in nodes if n.get("Relation Name") == "activemq_msgs"]
        assert scans and not any(n["Node Type"] == "Seq Scan" for n in scans), nodes
        assert not any("Sort" in n["Node Type"] for n in nodes)


def test_plans_give_the_right_rows(deep: Engine) -> None:
    with deep.connect() as conn:
        first = conn.execute(SQL.page_queue, _page_params(-10, 0)).all()
        assert [r[0] for r in first[:3]] == [9, 19, 29]  # priority 9 first, in ID order
        deep_page = conn.execute(SQL.page_queue, _page_params(0, 199_990)).all()
        assert [r[0] for r in deep_page] == [200_000]
        assert conn.execute(SQL.count_queue, {"container": "queue://deep"}).scalar_one() == DEPTH
        pending = {"container": "topic://deep", "client_id": "c", "sub_name": "s"}
        assert conn.execute(SQL.count_subscription, pending).scalar_one() == DEPTH - 20_000


@pytest.mark.parametrize("rows", [Rows.ONE, Rows.MANY], ids=["one", "many"])
def test_commit_removal_probes_by_id(deep: Engine, rows: Rows) -> None:
    # A store commit that consumes messages, planned for its parameters as the store's
    # commit connections do (custom plans): one index probe by ID per message, never a scan
    # of the destination (as _uidx or _cidx, which lead with CONTAINER, would be).
    stmt = commit_batch("", CommitShape(True, True, Rows.NONE, rows, Rows.NONE))
    ids = [150_000] if rows is Rows.ONE else [150_000, 150_001, 150_002]
    params: dict[str, Any] = {
        "holder": "b",
        "rm_ids": ids,
        "rm_containers": ["queue://deep"] * len(ids),
        "rm_outcomes": ["A"] * len(ids),
        "now": 0,
        "keep_body": False,
    }
    if rows is Rows.ONE:
        params.update({k: v[0] for k, v in params.items() if k.startswith("rm_")})
    nodes = list(_nodes(_plan(deep, stmt, params)))
    [scan] = [
        n for n in nodes if n.get("Relation Name") == "activemq_msgs" and "Scan" in n["Node Type"]
    ]
    assert scan["Node Type"] == "Index Scan", scan
    # The primary key or ActiveMQ's _iidx (ID, XID, CONTAINER): both lead with ID.
    assert scan["Index Name"] in ("activemq_msgs_pkey", "activemq_msgs_iidx"), scan
    assert scan["Index Cond"].startswith("((id = "), scan["Index Cond"]
