"""Alembic environment for mqstore.

The DSN comes from (in order) a connection handed in by the caller
(``config.attributes["connection"]``, Alembic's shared-connection recipe), ``-x dsn=...``,
``MQSTORE_DSN``, or ``sqlalchemy.url``. The table prefix from ``config.attributes``,
``-x prefix=...`` or ``MQSTORE_TABLE_PREFIX``. ``alembic stamp`` refuses tables mqstore
never migrated (``mqstore db adopt`` takes ActiveMQ's over); ``alembic stamp base`` undoes a
stamp. ``alembic downgrade`` refuses while a broker holds the lock row or the master lease;
``-x force=true`` goes ahead under a lease whose
holder is gone (as ``mqstore db downgrade --force``: no guard session of it connected, and
no renewal while watched for ``-x renew_ms=`` or ``MQSTORE_RENEW_MS``, default 5000, plus a
second), never under a held row lock. Each prefix has its own version table
(``<prefix>mqstore_version``), so several brokers' tables can live in one schema; an
``alembic upgrade`` that makes a prefix's first tables beside another's says so on stderr.
PostgreSQL's refusals a user can fix (no rights, a read-only database) end a run with the one
line ``mqstore db upgrade`` prints for them, and so does a database a newer mqstore migrated.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from alembic import context
from alembic.util.exc import CommandError
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

config = context.config
_x = context.get_x_argument(as_dictionary=True)


def _prefix() -> str:
    prefix = config.attributes.get("table_prefix")
    if prefix is None:
        prefix = _x.get("prefix", os.environ.get("MQSTORE_TABLE_PREFIX", ""))
    from mqstore.errors import ConfigError
    from mqstore.schema import check_prefix

    try:
        check_prefix(str(prefix))
    except ConfigError as exc:
        sys.exit(str(exc))
    config.attributes["table_prefix"] = prefix
    return str(prefix)


def _url() -> str:
    url = _x.get("dsn") or os.environ.get("MQSTORE_DSN") or config.get_main_option("sqlalchemy.url")
    if not url:
        sys.exit("no database: set MQSTORE_DSN or pass -x dsn=postgresql://user@host/dbname")
    for scheme in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(scheme):
            from mqstore.db import parse_dsn
            from mqstore.errors import ConfigError

            try:
                parse_dsn(url)  # one line, never echoing a password, for what cannot parse
            except ConfigError as exc:
                sys.exit(str(exc))
            return "postgresql+psycopg://" + url[len(scheme) :]
    scheme = url.split("://", 1)[0] if "://" in url else "(none)"  # never echo the rest
    sys.exit(f"unsupported DSN scheme {scheme!r}: use postgresql://USER@HOST/DBNAME")


def _configure(**kwargs: object) -> None:
    context.configure(
        version_table=(_prefix() + "mqstore_version").lower(),
        transaction_per_migration=False,
        **kwargs,  # type: ignore[arg-type]
    )


def run_migrations_offline() -> None:
    """Emit SQL to stdout without a database (``alembic upgrade head --sql``)."""
    _configure(url=_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def _alembic_command() -> str:
    """The alembic CLI command being run (``upgrade``, ``stamp``, ...), or ``""``."""
    cmd = getattr(config.cmd_opts, "cmd", None)
    return str(getattr(cmd[0], "__name__", "")) if cmd else ""


def _renew_ms() -> int:
    """The brokers' lease renewal period a forced downgrade watches the lease for."""
    from mqstore.migrate import DEFAULT_RENEW_MS

    given = _x.get("renew_ms") or os.environ.get("MQSTORE_RENEW_MS") or str(DEFAULT_RENEW_MS)
    if not given.isdigit() or int(given) == 0:
        sys.exit(f"the lease renewal period must be a whole number of ms, not {given!r}")
    return int(given)


def _refuse_downgrade(connection: Connection, prefix: str) -> None:
    from mqstore.migrate import refuse_downgrade

    forced = _x.get("force", "").lower() in ("1", "true", "yes")
    renew_ms = _renew_ms() if forced else 0
    said = refuse_downgrade(
        connection, prefix, override="-x force=true", forced=forced, renew_ms=renew_ms
    )
    if said is not None:
        print(said, file=sys.stderr)


def _refuse_stamp(connection: Connection, prefix: str) -> None:
    """``alembic stamp`` records a revision and changes no table: on tables mqstore never
    migrated (ActiveMQ's, not adopted yet) it would mark them as at that revision while
    they lack what its migrations make, and ``mqstore db adopt`` would then refuse them as
    managed already; on mqstore's own tables whose revision was lost, ``mqstore db adopt``
    finds the one they match. Stamping ``base`` (which undoes a stamp) always goes ahead."""
    from mqstore.errors import SchemaError
    from mqstore.migrate import refuse_unmanaged_tables

    targets = getattr(config.cmd_opts, "revisions", None) or []
    if all(str(target) == "base" for target in targets):
        return
    try:
        refuse_unmanaged_tables(connection, prefix)
    except SchemaError as exc:
        raise SchemaError(
            f"alembic stamp records a revision and changes no table, so these tables would "
            f"look migrated without being so: {exc}"
        ) from None


def _note_new_prefix(connection: Connection, prefix: str, beside: list[str]) -> None:
    """After ``alembic upgrade`` made a first set of tables for ``prefix`` beside other
    prefixes' tables (a forgotten ``-x prefix=``), say so on stderr."""
    from mqstore.migrate import current_revision, new_prefix_note

    if beside and current_revision(connection, prefix) is not None:
        downgrade = f"alembic -x dsn=... -x prefix={prefix!r} downgrade base"
        print(new_prefix_note(prefix, beside, "-x prefix={}", downgrade), file=sys.stderr)


def _run(connection: Connection, *, from_cli: bool) -> None:
    from mqstore.errors import SchemaError
    from mqstore.migrate import newer_schema_error, prefixes_beside, refuse_unmanaged_tables
    from mqstore.migration_guards import lock_migrations

    checks: dict[str, Callable[[Connection, str], None]] = {
        "upgrade": refuse_unmanaged_tables,
        "downgrade": _refuse_downgrade,
        "stamp": _refuse_stamp,
    }
    _configure(connection=connection)
    with context.begin_transaction():
        lock_migrations(connection, _prefix())  # another migration of the prefix goes first
        check = checks.get(_alembic_command()) if from_cli else None  # mqstore's run their own
        if check is not None:
            try:
                check(connection, _prefix())
            except SchemaError as exc:
                sys.exit(str(exc))
        upgrading = from_cli and _alembic_command() == "upgrade"
        beside = prefixes_beside(connection, _prefix()) if upgrading else []
        try:
            context.run_migrations()
        except SchemaError as exc:  # a migration's refusal: one line, nothing changed
            if not from_cli:
                raise
            sys.exit(str(exc))
        except CommandError:  # Alembic's "Can't locate revision" names no fix
            newer = newer_schema_error(connection, _prefix()) if from_cli else None
            if newer is not None:
                sys.exit(str(newer))
            raise
        _note_new_prefix(connection, _prefix(), beside)


def _exit_if_refused(exc: DBAPIError) -> None:
    """Exit with one line when ``exc`` is PostgreSQL's refusal a user can fix (the
    migration's transaction was rolled back, so nothing changed)."""
    from mqstore.migration_guards import describe_refusal

    message = describe_refusal(exc, f"alembic {_alembic_command()}")
    if message is not None:
        sys.exit(message)


def _connect_args(url: str) -> dict[str, object]:
    """mqstore's libpq settings for a run on its own engine: the network timeouts that end
    a connect to a server that never answers (and notice one gone later), and the
    ``application_name`` its sessions show, each unless the DSN (or PGAPPNAME) sets it."""
    from mqstore.db import APPLICATION_NAME, NETWORK_TIMEOUTS, parse_dsn

    query = parse_dsn(url).query
    args: dict[str, object] = {k: v for k, v in NETWORK_TIMEOUTS.items() if k not in query}
    if "application_name" not in query and "PGAPPNAME" not in os.environ:
        args["application_name"] = APPLICATION_NAME
    return args


def run_migrations_online() -> None:
    """Migrate on the caller's connection, or on a fresh engine from the DSN."""
    shared = config.attributes.get("connection")
    if shared is not None:
        _run(shared, from_cli=False)
        return
    url = _url()
    engine = create_engine(url, poolclass=pool.NullPool, connect_args=_connect_args(url))
    try:
        connection = engine.connect()
    except DBAPIError as exc:  # no server, no such database, refused credentials: one line
        from mqstore.db import describe_connect_error

        sys.exit(describe_connect_error(exc, engine.url))
    with connection:
        try:
            _run(connection, from_cli=True)
        except DBAPIError as exc:  # no rights, a standby, ...: one line, as mqstore's CLI says
            _exit_if_refused(exc)
            raise
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
