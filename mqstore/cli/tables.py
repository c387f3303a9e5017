"""Reads of tables a forgotten ``--table-prefix`` left missing: one line naming the prefix."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa


@contextmanager
def tables_named(engine: sa.Engine, prefix: str) -> Iterator[None]:
    """Turn a read of tables that do not exist under ``prefix`` into one line naming the
    prefixes whose tables are in the schema (a forgotten ``--table-prefix``)."""
    from mqstore.db import sqlstate
    from mqstore.errors import SchemaError
    from mqstore.migrate import prefixes_beside

    try:
        yield
    except sa.exc.DBAPIError as exc:
        if sqlstate(exc) != "42P01":
            raise
        with engine.connect() as conn:
            beside = prefixes_beside(conn, prefix)
        if not beside:
            raise
        named = ", ".join(repr(b) for b in beside)
        raise SchemaError(
            f"this schema has no tables for --table-prefix {prefix!r}; tables with prefix "
            f"{named} are there: give that prefix (--table-prefix or MQSTORE_TABLE_PREFIX)"
        ) from None
