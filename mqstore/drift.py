"""Drift check: every way a database's tables differ from the declared schema of a prefix."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from mqstore.schema import StoreSchema, build_schema

#: The dialect the statements named in the differences are written for.
_DIALECT = postgresql.dialect()  # type: ignore[no-untyped-call]


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
    added = _added_objects(conn, schema)
    unique_added = {(t, name): line for kind, t, name, line in added if kind == "unique"}
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
                sql_type = col.type.compile(dialect=_DIALECT)
                problems.append(
                    f"{table.name}.{col.name} is {got_t}, expected {want_t}: ALTER TABLE "
                    f"{table.name} ALTER COLUMN {col.name} TYPE {sql_type}"
                )
            if bool(got["nullable"]) != bool(col.nullable):
                want_null = "NULL" if col.nullable else "NOT NULL"
                change = "DROP NOT NULL" if col.nullable else "SET NOT NULL"
                problems.append(
                    f"{table.name}.{col.name} should be {want_null}: ALTER TABLE {table.name} "
                    f"ALTER COLUMN {col.name} {change}"
                )
            want_d, got_d = _norm_default(col.server_default), _norm_default(got.get("default"))
            if want_d != got_d:
                problems.append(f"{table.name}.{col.name} default is {got_d}, expected {want_d}")
            if (col.identity is not None) != bool(got.get("identity")):
                want_id = "an identity column" if col.identity is not None else "no identity"
                problems.append(f"{table.name}.{col.name} should be {want_id}")
        for extra, got in actual_cols.items():
            refuses = not got["nullable"] and got.get("default") is None and not got.get("identity")
            problems.append(
                f"{table.name}.{extra} is not part of the schema"
                + (f": {_EXTRA_NOT_NULL.format(table=table.name, column=extra)}" if refuses else "")
            )
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
                create = create_index_statement(table, name)
                problems.append(f"index {name} on {table.name} is missing: {create}")
                continue
            if got_idx != want:
                problems.append(f"index {name} on {table.name} is {got_idx}, expected {want}")
            problems.extend(_index_state(table, name, options[name]))
        for name in actual_idx:
            line = unique_added.get((table.name, name))  # one that refuses writes says so
            problems.append(line or f"index {name} on {table.name} is not part of the schema")
    problems.extend(line for kind, _, _, line in added if kind != "unique")
    if schema.lock.name in tables:
        rows = conn.execute(sa.select(schema.lock.c.id)).scalars().all()
        if list(rows) != [1]:
            fix = "" if 1 in rows else " (`mqstore db upgrade` puts it back)"
            problems.append(f"{schema.lock.name} must hold exactly the row ID=1, holds {rows}{fix}")
    return problems


def create_index_statement(table: sa.Table, name: str) -> str:
    """The ``CREATE INDEX`` that makes the declared index ``name`` of ``table``."""
    index = next(i for i in table.indexes if i.name == name)
    return str(sa.schema.CreateIndex(index).compile(dialect=_DIALECT))


#: What to do about a column the schema lacks that takes no NULL and has no default.
_EXTRA_NOT_NULL = (
    "NOT NULL without a default, every insert fails: ALTER TABLE {table} DROP COLUMN {column}"
)

#: The columns of the prefix's tables in the session's current schema: one catalog query.
_COLUMNS = sa.text(
    "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
    "a.attidentity <> '', a.atthasdef OR a.attgenerated <> '' "
    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
    "WHERE n.nspname = current_schema() AND c.relname = ANY(CAST(:names AS text[])) "
    "AND c.relkind IN ('r', 'p')"
)

#: What was added to the prefix's tables that can refuse a row the broker writes or
#: deletes: CHECK, foreign-key and exclusion constraints (and foreign keys of other
#: tables referring to them), enabled triggers, rules, and unique indexes the schema does
#: not declare. One catalog query.
_ADDED = sa.text(
    "WITH ours AS (SELECT c.oid, c.relname FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
    "AND c.relname = ANY(CAST(:names AS text[])) AND c.relkind IN ('r', 'p')) "
    "SELECT o.relname, con.contype::text, con.conname, pg_get_constraintdef(con.oid), '' "
    "FROM pg_constraint con JOIN ours o ON o.oid = con.conrelid "
    "WHERE con.contype IN ('c', 'f', 'x') "
    "UNION ALL SELECT o.relname, 'r', con.conname, pg_get_constraintdef(con.oid), "
    "con.conrelid::regclass::text FROM pg_constraint con JOIN ours o ON o.oid = con.confrelid "
    "WHERE con.contype = 'f' AND con.conrelid NOT IN (SELECT oid FROM ours) "
    "UNION ALL SELECT o.relname, 't', t.tgname, pg_get_triggerdef(t.oid), '' "
    "FROM pg_trigger t JOIN ours o ON o.oid = t.tgrelid "
    "WHERE NOT t.tgisinternal AND t.tgenabled <> 'D' "
    "UNION ALL SELECT o.relname, 'R', r.rulename, pg_get_ruledef(r.oid), '' "
    "FROM pg_rewrite r JOIN ours o ON o.oid = r.ev_class WHERE r.rulename <> '_RETURN' "
    "UNION ALL SELECT o.relname, 'u', ic.relname, pg_get_indexdef(i.indexrelid), '' "
    "FROM pg_index i JOIN ours o ON o.oid = i.indrelid JOIN pg_class ic ON ic.oid = i.indexrelid "
    "WHERE i.indisunique AND NOT i.indisprimary "
    "AND ic.relname <> ALL(CAST(:unique_names AS text[])) "
    "ORDER BY 1, 2, 3"
)

_CONSTRAINT_KINDS = {"c": "CHECK constraint", "f": "foreign key", "x": "exclusion constraint"}


def _added_objects(conn: Connection, schema: StoreSchema) -> list[tuple[str, str, str, str]]:
    """``(kind, table, name, line)`` for everything :data:`_ADDED` finds, each line naming
    the object, its definition and the statement that removes it; ``kind`` is ``unique``
    for an index (which :func:`schema_differences` lists among the indexes, in these
    words)."""
    declared_unique = [str(i.name) for t in schema.tables for i in t.indexes if i.unique]
    rows = conn.execute(
        _ADDED,
        {"names": [t.name for t in schema.tables], "unique_names": declared_unique},
    ).all()
    out: list[tuple[str, str, str, str]] = []
    for table, kind, name, raw, other in rows:
        definition = " ".join(str(raw).split())
        quoted = f'"{name}"' if name != name.lower() or not name.isidentifier() else name
        if kind in _CONSTRAINT_KINDS:
            what = f"{_CONSTRAINT_KINDS[kind]} {name} ({definition})"
            fix = f"ALTER TABLE {table} DROP CONSTRAINT {quoted}"
        elif kind == "r":
            what = f"a foreign key {name} of table {other} referring to it ({definition})"
            fix = f"ALTER TABLE {other} DROP CONSTRAINT {quoted}"
        elif kind == "t":
            what = f"trigger {name} ({definition})"
            fix = f"DROP TRIGGER {quoted} ON {table}"
        elif kind == "R":
            what = f"rule {name} ({definition.rstrip(';')})"
            fix = f"DROP RULE {quoted} ON {table}"
        else:
            line = (
                f"index {name} on {table} is unique and not part of the schema, it refuses "
                f"rows the broker writes ({definition}): DROP INDEX {quoted}"
            )
            out.append(("unique", table, name, line))
            continue
        line = f"{table} has {what}, which is not part of the schema: {fix}"
        out.append((kind, table, name, line))
    return out


def _format_type(formatted: str) -> str:
    """PostgreSQL's ``format_type`` in :func:`type_name`'s words."""
    if formatted.startswith("character varying"):
        length = formatted[len("character varying") :].strip("()") or "None"
        return f"VARCHAR({length})"
    return formatted.upper()


def write_refusals(conn: Connection, prefix: str = "") -> list[str]:
    """The differences from the declared schema that make the broker's statements fail,
    each with what to do: a table or column missing (as :func:`missing_parts` says), a
    column of another type or length, NOT NULL where the schema takes NULL, an identity
    column that is not one, a column added NOT NULL without a default, and the constraints,
    triggers, rules and unique indexes :data:`_ADDED` finds. Two catalog queries, cheap
    enough for every start; the differences it leaves out (an index added or missing, a
    default) slow the broker or are what ``mqstore db check`` lists, but refuse no write."""
    schema = build_schema(prefix)
    names = [t.name for t in schema.tables]
    found: dict[str, dict[str, tuple[str, bool, bool, bool]]] = {}
    for table, column, formatted, not_null, identity, has_default in conn.execute(
        _COLUMNS, {"names": names}
    ):
        columns = found.setdefault(table, {})
        if column is not None:
            columns[column] = (_format_type(formatted), not_null, identity, has_default)
    problems: list[str] = []
    for table in schema.tables:
        if table.name not in found:
            problems.append(f"table {table.name} is missing")
            continue
        actual = dict(found[table.name])
        for col in table.columns:
            got = actual.pop(col.name, None)
            if got is None:
                problems.append(f"{table.name}.{col.name} is missing")
                continue
            got_type, not_null, identity, _ = got
            want_type = type_name(col.type)
            if got_type != want_type:
                sql_type = col.type.compile(dialect=_DIALECT)
                problems.append(
                    f"{table.name}.{col.name} is {got_type}, expected {want_type}: ALTER TABLE "
                    f"{table.name} ALTER COLUMN {col.name} TYPE {sql_type}"
                )
            if not_null and col.nullable:
                problems.append(
                    f"{table.name}.{col.name} should be NULL: ALTER TABLE {table.name} "
                    f"ALTER COLUMN {col.name} DROP NOT NULL"
                )
            if col.identity is not None and not identity:
                problems.append(
                    f"{table.name}.{col.name} should be an identity column: ALTER TABLE "
                    f"{table.name} ALTER COLUMN {col.name} ADD GENERATED ALWAYS AS IDENTITY, "
                    f"then setval() its sequence past MAX({col.name})"
                )
        for extra, (_, not_null, identity, has_default) in actual.items():
            if not_null and not identity and not has_default:
                problems.append(
                    f"{table.name}.{extra} is not part of the schema: "
                    + _EXTRA_NOT_NULL.format(table=table.name, column=extra)
                )
    problems.extend(line for _, _, _, line in _added_objects(conn, schema))
    return problems
