"""Export of a store that holds no message yet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from mqstore.openwire import encode, text_message
from spark_etl.export import current_messages, export, read_dataset
from tests.spark.conftest import dsn_of, execute


def _store_text(engine: Engine, text: str, timestamp: int) -> None:
    """One text message, ID 1 on queue://Q, as ActiveMQ stores it."""
    msg = text_message(
        text, destination="queue://Q", producer_id="ID:p-1-2-3:1:1", sequence=1,
        timestamp=timestamp,
    )  # fmt: skip
    execute(
        engine,
        "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, msg,"
        " priority) VALUES (1, 'queue://Q', :p, 1, 0, :m, 0)",
        {"p": msg.msgid_prod, "m": encode(msg)},
    )


def test_the_current_messages_of_an_empty_store_are_no_rows(
    spark: Any, engine: Engine, tmp_path: Path
) -> None:
    """An export of a store without messages writes no message file; what it archives as
    current is then no rows, with the columns (and types) of exported messages."""
    dsn = dsn_of(engine)
    result = export(spark, dsn, tmp_path)
    assert result.message_rows == 0 and result.history_rows == 0
    empty = current_messages(spark, tmp_path)
    assert empty.count() == 0

    _store_text(engine, "first", timestamp=1795400000000)
    assert export(spark, dsn, tmp_path).message_rows == 1
    current = current_messages(spark, tmp_path)
    assert [r["id"] for r in current.collect()] == [1]
    assert empty.dtypes == current.dtypes


def test_an_archive_of_messages_without_a_jms_timestamp_reads_with_a_date_column(
    spark: Any, engine: Engine, tmp_path: Path
) -> None:
    """Producers may disable JMSTimestamp (0): every row then lies in the null ``date``
    partition, from which Spark cannot tell the type. The archive still reads with a
    ``date`` column of type date (a void column cannot be written to Parquet again)."""
    _store_text(engine, "no clock", timestamp=0)
    assert export(spark, dsn_of(engine), tmp_path / "out").message_rows == 1
    messages = read_dataset(spark, tmp_path / "out" / "messages")
    assert dict(messages.dtypes)["date"] == "date"
    messages.write.parquet(str(tmp_path / "copy"))
    copy = spark.read.parquet(str(tmp_path / "copy")).collect()
    assert [(r["text"], r["date"]) for r in copy] == [("no clock", None)]
