"""A statement the database refuses is reported without its values: a message's body and
properties never reach a log or a terminal through an error's text."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

SECRET = b"card 4111-1111-1111-1111"


def test_a_refused_insert_reports_no_message_bytes(engine: Engine) -> None:
    insert = sa.text(
        "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, msg) "
        "VALUES (1, :container, 'p', 1, :msg)"
    )
    with pytest.raises(DBAPIError) as refused, engine.begin() as conn:
        conn.execute(insert, {"container": "queue://" + "x" * 300, "msg": SECRET})
    shown = str(refused.value)
    assert "value too long" in shown  # what went wrong is still said
    assert "4111" not in shown and "x" * 300 not in shown
