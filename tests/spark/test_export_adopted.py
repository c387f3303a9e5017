"""Export across the switch from a plain ActiveMQ database to one mqstore adopted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from mqstore import takeover
from spark_etl.export import export, load_watermarks, read_dataset
from tests.spark.conftest import dsn_of, execute

Q, T = "queue://FIXTURE.Q", "topic://FIXTURE.T"


def test_removals_before_the_database_was_adopted_are_kept_in_the_history(
    spark: Any, activemq_engine: Engine, tmp_path: Path
) -> None:
    """The first runs compare snapshots (plain ActiveMQ keeps no history); once mqstore has
    adopted the tables, ``mqstore_history`` records removals. Messages ActiveMQ consumed
    between the last run before adoption and the first after it are in neither: the
    first run after adoption still derives them from its predecessor's snapshot, and
    counts the ones ``mqstore_history`` records only once."""
    dsn = dsn_of(activemq_engine)
    first = export(spark, dsn, tmp_path)
    assert first.message_rows == 17
    assert load_watermarks(tmp_path)["history_source"] == "snapshot-diff"

    execute(activemq_engine, "DELETE FROM activemq_msgs WHERE id IN (1, 7)")  # by ActiveMQ
    takeover.adopt(activemq_engine)
    execute(  # consumed through mqstore, which records it
        activemq_engine,
        "WITH gone AS (DELETE FROM activemq_msgs WHERE id = 2 RETURNING *) "
        "INSERT INTO mqstore_history (id, container, msgid_prod, msgid_seq, priority,"
        " expiration, enqueued_at, removed_at, outcome, msg) SELECT id, container, msgid_prod,"
        " msgid_seq, priority, expiration, 1795306859000, 1795400000000, 'acknowledged', msg"
        " FROM gone",
    )
    second = export(spark, dsn, tmp_path, now_ms=1795400000001)
    assert second.message_rows == 0
    assert second.history == {Q: 2, T: 1}
    assert load_watermarks(tmp_path)["history_source"] == "mqstore_history"

    third = export(spark, dsn, tmp_path)
    assert third.message_rows == 0 and third.history_rows == 0
    history = read_dataset(spark, tmp_path / "history").orderBy("id").collect()
    assert [(h["id"], h["container"], h["outcome"]) for h in history] == [
        (1, Q, "removed"),
        (2, Q, "acknowledged"),
        (7, T, "removed"),
    ]
