"""Extract: JDBC reads of ActiveMQ's tables (and mqstore's history) into DataFrames.

Column names come back lower case whatever the database returns. The big table,
``ACTIVEMQ_MSGS``, is read in ``ID`` ranges (one connection per partition); incremental
reads push ``ID > watermark`` down to PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, quote, unquote, urlsplit

import sqlalchemy as sa
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from mqstore.schema import table_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from mqstore.archive import Identity

DEFAULT_FETCHSIZE = 10_000
#: Bytes of rows one JDBC fetch may hold: pgjdbc keeps a whole fetch in the heap, so
#: 10 000 rows of 1 MiB messages would be 10 GiB per partition.
FETCH_BUFFER_BYTES = 64 * 1024 * 1024
#: The column whose widest value sets how many rows of a table one fetch holds.
_WIDE_COLUMNS = {"ACTIVEMQ_MSGS": "msg", "MQSTORE_HISTORY": "msg"}
_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2")
_DROPPED_PARAMS = {"host", "hostaddr", "port", "user", "password", "dbname"}
#: What a table prefix may be: the start of an unquoted PostgreSQL name (or nothing).
_PREFIX = re.compile(r"([^\W\d][\w$]*)?")


class SourceError(ValueError):
    """A DSN or table the Spark jobs cannot use; the message says what to change."""


@dataclass(frozen=True)
class JdbcSource:
    """Where to read: a JDBC URL, its connection properties and the table prefix."""

    url: str
    properties: dict[str, str] = field(default_factory=dict)
    prefix: str = ""
    fetchsize: int = DEFAULT_FETCHSIZE

    def table(self, base: str) -> str:
        """PostgreSQL name of ``base`` (``ACTIVEMQ_MSGS``...) under this prefix."""
        return table_name(self.prefix, base)

    def options(self) -> dict[str, str]:
        """Reader options shared by every read.

        ``prepareThreshold=-1`` makes pgjdbc use the binary protocol from the first
        execution: ``bytea`` then arrives as raw bytes instead of hex text (the ``MSG``
        read is about twice as fast).
        """
        return {
            "url": self.url,
            "driver": "org.postgresql.Driver",
            "fetchsize": str(self.fetchsize),
            "prepareThreshold": "-1",
            **self.properties,
        }


def jdbc_source(dsn: str, prefix: str = "", fetchsize: int = DEFAULT_FETCHSIZE) -> JdbcSource:
    """Translate a ``postgresql://user:pw@host:port/db?opts`` DSN into a :class:`JdbcSource`.

    User and password become connection properties (never part of the URL). libpq
    parameters other than host/port/user/password are passed on (``sslmode`` and the
    like mean the same to pgjdbc). Port, database, user and password the DSN leaves out
    come from ``PGPORT``, ``PGDATABASE``, ``PGUSER`` and ``PGPASSWORD``, as for libpq.
    A Unix-socket DSN is refused: pgjdbc speaks TCP only; so is a ``prefix`` that cannot
    begin an unquoted SQL name (no broker can use it; the jobs write it into their SQL).
    """
    if not _PREFIX.fullmatch(prefix):
        raise SourceError(
            f"invalid --table-prefix {prefix!r}: a table prefix is the start of an unquoted "
            "SQL name (letters, digits, '_' and '$', not first a digit or '$'), e.g. BRK1_"
        )
    dsn = dsn.strip()  # as mqstore.db.parse_dsn: a secret file's final newline, a space
    scheme, sep, _ = dsn.partition("://")
    if not sep or scheme not in _SCHEMES:
        got = f"got scheme {scheme!r}" if sep else "got no URL"  # never echo 'password=...'
        raise SourceError(
            f"invalid DSN: expected postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME, {got} "
            "(libpq's keyword form 'host=... dbname=...' is not accepted; set MQSTORE_DSN "
            "or --dsn)"
        )
    try:
        parts = urlsplit("postgresql://" + dsn.split("://", 1)[1])
    except ValueError as exc:  # an unclosed '[' of an IPv6 host (the text never has the DSN)
        raise SourceError(
            f"invalid DSN: {exc} (write an IPv6 host in brackets, "
            "postgresql://USER@[::1]:5432/DBNAME; set MQSTORE_DSN or --dsn)"
        ) from None
    # As libpq: percent-decoded, a '+' kept (parse_qsl would make it a space).
    params = {
        unquote(k): unquote(v)
        for k, _, v in (p.partition("=") for p in parts.query.split("&") if p)
    }
    host = params.get("host") or unquote(parts.hostname or "")
    if not host or host.startswith("/"):
        raise SourceError(
            "the PostgreSQL JDBC driver cannot use a Unix-socket DSN "
            f"({'host=' + host if host else 'no host'}): give a TCP host, e.g. "
            "postgresql://USER@127.0.0.1:5432/DBNAME"
        )
    port = _port(parts, params)
    database = (
        unquote(parts.path.lstrip("/")) or params.get("dbname") or os.environ.get("PGDATABASE")
    ) or ""
    host_part = f"[{host}]" if ":" in host else host
    extra = {k: v for k, v in params.items() if k not in _DROPPED_PARAMS}
    # pgjdbc URL-decodes the database and each value ('+' a space): encode them all.
    query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in sorted(extra.items()))
    url = f"jdbc:postgresql://{host_part}:{port}/{quote(database, safe='')}"
    url += f"?{query}" if query else ""
    props: dict[str, str] = {}
    user = unquote(parts.username) if parts.username else params.get("user")
    password = unquote(parts.password) if parts.password else params.get("password")
    user = user or os.environ.get("PGUSER")
    password = password or os.environ.get("PGPASSWORD")
    if user:
        props["user"] = user
    if password:
        props["password"] = password
    return JdbcSource(url=url, properties=props, prefix=prefix, fetchsize=fetchsize)


def _port(parts: SplitResult, params: dict[str, str]) -> int:
    """The DSN's port: its ``port`` parameter, the host's, else ``PGPORT``, else 5432, as
    libpq takes it (the checks before Spark connect with libpq); :class:`SourceError`
    naming where an unusable one comes from."""
    host = parts.netloc.rpartition("@")[2]
    _, colon, in_host = host.rpartition("]")[2].rpartition(":")
    for raw, where in (
        (params.get("port"), "the DSN's port parameter"),
        (in_host if colon else None, f"the DSN host {host!r}"),
        (os.environ.get("PGPORT"), "PGPORT"),
    ):
        if raw:
            if raw.isascii() and raw.isdigit() and 0 < int(raw) < 65536:
                return int(raw)
            raise SourceError(f"invalid port {raw!r} in {where}: give a number from 1 to 65535")
    return 5432


def _libpq_url(dsn: str) -> str:
    """``dsn`` in a scheme :func:`mqstore.db.parse_dsn` accepts."""
    scheme, _, rest = dsn.partition("://")
    return f"postgresql://{rest}" if scheme == "postgresql+psycopg2" else dsn


def inspect_database(dsn: str, prefix: str = "", tables: tuple[str, ...] = ()) -> Identity:
    """Connect once with psycopg (no Spark) and return the database's identity.

    Raises :class:`SourceError` for a DSN pgjdbc cannot use or a table of ``tables``
    (``ACTIVEMQ_MSGS``...) missing under ``prefix``, and
    :class:`mqstore.errors.DatabaseUnavailableError` (one line: unknown role, missing
    database, refused connection...) when the database cannot be reached.
    """
    from mqstore import db
    from mqstore.archive import database_identity
    from mqstore.errors import ConfigError, DatabaseUnavailableError

    jdbc_source(dsn, prefix)  # refuses what pgjdbc cannot use, before connecting
    try:
        engine = db.create_engine(_libpq_url(dsn), pool_size=1)
    except ConfigError as exc:
        raise SourceError(str(exc)) from None
    try:
        db.check_connection(engine)
        with engine.connect() as conn:

            def found(base: str) -> bool:
                sql = sa.text("SELECT to_regclass(:name) IS NOT NULL")
                return bool(conn.execute(sql, {"name": table_name(prefix, base)}).scalar())

            missing = [table_name(prefix, base) for base in tables if not found(base)]
            if missing:
                raise SourceError(_missing_tables(conn, engine.url, missing, prefix))
            return database_identity(conn)
    except DBAPIError as exc:  # the connection went away between the check and the queries
        raise DatabaseUnavailableError(db.describe_connect_error(exc, engine.url)) from None
    finally:
        engine.dispose()


def _missing_tables(conn: sa.Connection, url: URL, missing: list[str], prefix: str) -> str:
    """One line naming the missing tables and the prefixes this database does have."""
    rows = conn.execute(
        sa.text(
            "SELECT DISTINCT left(c.relname, length(c.relname) - length('activemq_msgs')) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname LIKE '%activemq\\_msgs' AND c.relkind IN ('r', 'p') "
            "AND n.nspname = ANY (current_schemas(false)) ORDER BY 1"
        )
    ).scalars()
    found = [repr(p.upper()) for p in rows]
    from mqstore import db

    where = f"database {url.database!r} on {db.target(url)}"
    there = f"; its ActiveMQ tables have prefix {', '.join(found)}" if found else ""
    return (
        f"no table {', '.join(missing)} in {where} (--table-prefix {prefix!r}){there}: "
        "give the broker's tablePrefix with --table-prefix or MQSTORE_TABLE_PREFIX"
    )


def _lower(df: DataFrame) -> DataFrame:
    """Normalise column names to lower case (pandas code inside UDFs is case sensitive)."""
    return df.toDF(*[c.lower() for c in df.columns])


def read_query(spark: SparkSession, src: JdbcSource, sql: str) -> DataFrame:
    """Run one (small) SQL query through JDBC."""
    return _lower(spark.read.format("jdbc").options(**src.options()).option("query", sql).load())


def read_table(spark: SparkSession, src: JdbcSource, base: str) -> DataFrame:
    """A whole (small) table: ``ACTIVEMQ_ACKS``, ``ACTIVEMQ_LOCK``."""
    return _lower(
        spark.read.format("jdbc").options(**src.options()).option("dbtable", src.table(base)).load()
    )


def table_exists(spark: SparkSession, src: JdbcSource, base: str) -> bool:
    """Whether ``base`` exists under the prefix (on the connection's search_path)."""
    name = src.table(base).replace("'", "''")
    row = read_query(spark, src, f"SELECT to_regclass('{name}') IS NOT NULL AS present").first()
    return bool(row and row["present"])


def rows_per_fetch(widest: int | None, most: int = DEFAULT_FETCHSIZE) -> int:
    """Rows one fetch may hold when the widest value is ``widest`` bytes (at least one)."""
    if not widest:
        return most
    return max(1, min(most, FETCH_BUFFER_BYTES // widest))


def _sized(src: JdbcSource, widest: int | None) -> JdbcSource:
    return dataclasses.replace(src, fetchsize=rows_per_fetch(widest, src.fetchsize))


def _widest(base: str) -> str:
    """SQL for the widest value of ``base``'s wide column (its stored size: PostgreSQL reads
    it from the value's header, without fetching the value itself)."""
    column = _WIDE_COLUMNS.get(base)
    return f"max(octet_length({column}))" if column else "NULL::bigint"


def key_splits(
    spark: SparkSession,
    src: JdbcSource,
    base: str,
    key: str,
    *,
    after: int | None = None,
    upto: int | None = None,
    parts: int = 1,
) -> tuple[int | None, list[int]]:
    """Of the rows with ``after < key <= upto``: the widest value of the table's wide
    column, and the ``key`` values that cut them into ``parts`` ranges of about as many rows
    each (its quantiles, by ``percentile_disc``: distinct, ascending, fewer when values
    repeat; none for no rows), in one query."""
    conds = [f"{key} > {int(after)}"] if after is not None else []
    conds += [f"{key} <= {int(upto)}"] if upto is not None else []
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    fractions = ", ".join(f"{i / parts!r}" for i in range(1, parts))
    cuts = (
        f"array_to_string(percentile_disc(ARRAY[{fractions}]::float8[]) "
        f"WITHIN GROUP (ORDER BY {key}), ',')"
        if parts > 1
        else "NULL::text"
    )
    row = read_query(
        spark,
        src,
        f"SELECT min({key}) AS lo, max({key}) AS hi, {_widest(base)} AS widest, "
        f"{cuts} AS cuts FROM {src.table(base)}{where}",
    ).first()
    if row is None or row["lo"] is None:
        return None, []
    widest = None if row["widest"] is None else int(row["widest"])
    lo, hi = int(row["lo"]), int(row["hi"])
    values = {int(v) for v in (row["cuts"] or "").split(",") if v}
    return widest, sorted(v for v in values if lo <= v < hi)


def default_partitions(spark: SparkSession) -> int:
    """About one partition per core (more do not read faster and cost connections)."""
    return max(1, int(spark.sparkContext.defaultParallelism))


def read_ranged(
    spark: SparkSession,
    src: JdbcSource,
    base: str,
    key: str,
    *,
    after: int | None = None,
    upto: int | None = None,
    partitions: int | None = None,
    columns: list[str] | None = None,
) -> DataFrame:
    """Rows of ``base`` with ``after < key <= upto``, read in ``partitions`` key ranges.

    The ranges are cut at the quantiles of ``key`` among those rows (:func:`key_splits`),
    so each holds about as many rows however the keys are spread (an even split of
    MIN..MAX gave one range all the rows of a table whose keys jump). The key filters
    are pushed down to PostgreSQL. Each fetch holds at most ``FETCH_BUFFER_BYTES`` of the
    widest row (:func:`rows_per_fetch`).
    """
    n = partitions or default_partitions(spark)
    widest, cuts = key_splits(spark, src, base, key, after=after, upto=upto, parts=n)
    options = _sized(src, widest).options()
    if cuts:
        ranges = [
            f"{key} <= {cuts[0]}",
            *(f"{key} > {a} AND {key} <= {b}" for a, b in itertools.pairwise(cuts)),
            f"{key} > {cuts[-1]}",
        ]
        url = options.pop("url")
        df = _lower(spark.read.jdbc(url, src.table(base), predicates=ranges, properties=options))
    else:
        df = _lower(spark.read.format("jdbc").options(**options, dbtable=src.table(base)).load())
    if columns is not None:
        df = df.select(*columns)
    if after is not None:
        df = df.where(df[key] > after)
    if upto is not None:
        df = df.where(df[key] <= upto)
    return df


def read_keys(
    spark: SparkSession, src: JdbcSource, base: str, keys: list[int], key: str
) -> DataFrame:
    """Rows of ``base`` whose ``key`` is one of ``keys`` (stragglers, so a short list)."""
    table = src.table(base)
    id_list = ",".join(str(int(k)) for k in keys) or "NULL"
    where = f"WHERE {key} IN ({id_list})"
    row = read_query(spark, src, f"SELECT {_widest(base)} AS widest FROM {table} {where}").first()
    widest = None if row is None or row["widest"] is None else int(row["widest"])
    return read_query(spark, _sized(src, widest), f"SELECT * FROM {table} {where}")


def read_msgs(
    spark: SparkSession,
    src: JdbcSource,
    *,
    after: int | None = None,
    upto: int | None = None,
    partitions: int | None = None,
) -> DataFrame:
    """``ACTIVEMQ_MSGS`` rows with ``after < ID <= upto``, partitioned on ``ID``."""
    return read_ranged(
        spark, src, "ACTIVEMQ_MSGS", "id", after=after, upto=upto, partitions=partitions
    )


SNAPSHOT_COLUMNS = ["id", "container", "msgid_prod", "msgid_seq", "expiration", "priority", "xid"]


def read_msg_index(spark: SparkSession, src: JdbcSource) -> DataFrame:
    """Every ``ACTIVEMQ_MSGS`` row without its ``MSG`` (the snapshot of what is stored)."""
    cols = ", ".join(SNAPSHOT_COLUMNS)
    return read_query(spark, src, f"SELECT {cols} FROM {src.table('ACTIVEMQ_MSGS')}")


def read_acks(spark: SparkSession, src: JdbcSource) -> DataFrame:
    """``ACTIVEMQ_ACKS``: durable subscriptions (one row per priority) and XA acks."""
    return read_table(spark, src, "ACTIVEMQ_ACKS")


def read_lock(spark: SparkSession, src: JdbcSource) -> DataFrame:
    """``ACTIVEMQ_LOCK``: the lease row."""
    return read_table(spark, src, "ACTIVEMQ_LOCK")


__all__ = [
    "DEFAULT_FETCHSIZE",
    "FETCH_BUFFER_BYTES",
    "SNAPSHOT_COLUMNS",
    "JdbcSource",
    "SourceError",
    "inspect_database",
    "jdbc_source",
    "key_splits",
    "read_acks",
    "read_keys",
    "read_lock",
    "read_msg_index",
    "read_msgs",
    "read_query",
    "read_ranged",
    "read_table",
    "rows_per_fetch",
    "table_exists",
]
