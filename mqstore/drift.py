"""Drift check: every way a database's tables differ from the declared schema of a prefix."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mqstore.schema import build_schema


def type_name(col_type: sa.types.TypeEngine[object]) -> str:
    """A column type as compared here: ``BIGINT``, ``VARCHAR(250)``, ``BYTEA``, ``TEXT``."""
    name = type(col_type).__name__.upper()
    if name in ("BIGINT", "BIGINTEGER"):
        return "BIGINT"
    if name in ("VARCHAR", "STRING"):
        return f"VARCHAR({getattr(col_type, 'length', None)})"
    if name in ("BYTEA", "LARGEBINARY"):
        return "BYTEA"
    if name == "TEXT":
        return "TEXT"
    return name


def _norm_default(value: object) -> str | None:
    if value is None or isinstance(value, sa.Identity):
        return None
    text = str(getattr(value, "arg", value))
    return text.strip("'()").split("::")[0]


def _norm_where(value: object) -> str | None:
    if value is None:
        return None
    return " ".join(str(value).replace("(", " ").replace(")", " ").lower().split())


def _norm_expr(expr: str) -> str:
    return expr.replace("(", "").replace(")", "").replace(" ", "").lower()


def _declared_indexes(table: sa.Table) -> dict[str, tuple[tuple[str, ...], bool, str | None]]:
    out: dict[str, tuple[tuple[str, ...], bool, str | None]] = {}
    for index in table.indexes:
        cols = tuple(
            _norm_expr(getattr(expr, "name", None) or str(expr)) for expr in index.expressions
        )
        where = index.dialect_options["postgresql"].get("where")
        out[str(index.name)] = (cols, bool(index.unique), _norm_where(where))
    return out


def _index_state(table: sa.Table, name: str, options: dict[str, object]) -> list[str]:
    """What reflection shows beside an index's columns: its access method, and whether
    PostgreSQL uses it at all (a failed concurrent build leaves it invalid, and unused)."""
    declared = next(i for i in table.indexes if i.name == name)
    want = declared.dialect_options["postgresql"].get("using") or "btree"
    got = options.get("postgresql_using") or "btree"
    out = [] if got == want else [f"index {name} on {table.name} uses {got}, expected {want}"]
    if options.get("postgresql_invalid"):
        out.append(
            f"index {name} on {table.name} is invalid (a CREATE INDEX CONCURRENTLY or REINDEX "
            f"that failed): PostgreSQL does not use it; remove what made it fail, then "
            f"REINDEX INDEX {name}"
        )
    return out


def missing_parts(conn: Connection, prefix: str = "") -> list[str]:
    """The tables and columns of the declared schema the database lacks, which make
    statements fail (the first of :func:`schema_differences`, in its words)."""
    schema = build_schema(prefix)
    inspector = sa.inspect(conn)
    tables = set(inspector.get_table_names())
    missing: list[str] = []
    for table in schema.tables:
        if table.name not in tables:
            missing.append(f"table {table.name} is missing")
            continue
        present = {c["name"] for c in inspector.get_columns(table.name)}
        missing += [
            f"{table.name}.{c.name} is missing" for c in table.columns if c.name not in present
        ]
    return missing


def schema_differences(conn: Connection, prefix: str = "") -> list[str]:
    """Every way the database differs from the declared schema (empty when it matches)."""
    schema = build_schema(prefix)
    inspector = sa.inspect(conn)
    tables = set(inspector.get_table_names())
    problems: list[str] = []
    for table in schema.tables:
        if table.name not in tables:
            problems.append(f"table {table.name} is missing")
            continue
        actual_cols = {c["name"]: c for c in inspector.get_columns(table.name)}
        for col in table.columns:
            got = actual_cols.pop(col.name, None)
            if got is None:
                problems.append(f"{table.name}.{col.name} is missing")
                continue
            want_t, got_t = type_name(col.type), type_name(got["type"])
            if want_t != got_t:
                problems.append(f"{table.name}.{col.name} is {got_t}, expected {want_t}")
            if bool(got["nullable"]) != bool(col.nullable):
                want_null = "NULL" if col.nullable else "NOT NULL"
                problems.append(f"{table.name}.{col.name} should be {want_null}")
            want_d, got_d = _norm_default(col.server_default), _norm_default(got.get("default"))
            if want_d != got_d:
                problems.append(f"{table.name}.{col.name} default is {got_d}, expected {want_d}")
            if (col.identity is not None) != bool(got.get("identity")):
                want_id = "an identity column" if col.identity is not None else "no identity"
                problems.append(f"{table.name}.{col.name} should be {want_id}")
        for extra in actual_cols:
            problems.append(f"{table.name}.{extra} is not part of the schema")
        pk = inspector.get_pk_constraint(table.name)
        want_pk = [c.name for c in table.primary_key.columns]
        if list(pk.get("constrained_columns") or []) != want_pk or pk.get("name") != (
            table.primary_key.name
        ):
            got_pk = tuple(pk.get("constrained_columns") or [])
            problems.append(
                f"{table.name} primary key is {pk.get('name')}{got_pk}"
                f", expected {table.primary_key.name}{tuple(want_pk)}"
            )
        reflected = inspector.get_indexes(table.name)
        actual_idx = {
            str(i["name"]): (
                tuple(_norm_expr(str(c)) for c in (i.get("expressions") or i["column_names"])),
                bool(i["unique"]),
                _norm_where(i.get("dialect_options", {}).get("postgresql_where")),
            )
            for i in reflected
        }
        options = {str(i["name"]): dict(i.get("dialect_options", {})) for i in reflected}
        for name, want in _declared_indexes(table).items():
            got_idx = actual_idx.pop(name, None)
            if got_idx is None:
                problems.append(f"index {name} on {table.name} is missing")
                continue
            if got_idx != want:
                problems.append(f"index {name} on {table.name} is {got_idx}, expected {want}")
            problems.extend(_index_state(table, name, options[name]))
        for name in actual_idx:
            problems.append(f"index {name} on {table.name} is not part of the schema")
    if schema.lock.name in tables:
        rows = conn.execute(sa.select(schema.lock.c.id)).scalars().all()
        if list(rows) != [1]:
            fix = "" if 1 in rows else " (`mqstore db upgrade` puts it back)"
            problems.append(f"{schema.lock.name} must hold exactly the row ID=1, holds {rows}{fix}")
    return problems
