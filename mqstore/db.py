"""Engines from DSNs, with one-line errors for bad DSNs and unreachable databases."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

import psycopg
import sqlalchemy as sa
from psycopg.types.array import ListBinaryDumper
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError

from mqstore.errors import ConfigError, DatabaseUnavailableError, SchemaError

_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
T = TypeVar("T")


class ByteaArray(list[bytes]):
    """Byte strings for a ``bytea[]`` parameter, sent in PostgreSQL's binary format.

    psycopg sends a plain list as a text array: every byte of every element hex-escaped,
    then quoted, and parsed back by the server, about 10 µs per KiB on each side. Message
    bodies go in arrays on every insert, so they travel as they are instead.
    """


psycopg.adapters.register_dumper(ByteaArray, ListBinaryDumper)


#: A DSN whose host and port do not parse, in words that do not echo it.
_UNPARSABLE_HOST = (
    "invalid DSN: its host and port do not parse (a forgotten @HOST after the password, an "
    "'@' in the password, a port that is no number, an IPv6 host without its ']'); write "
    "postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME and percent-encode '@', ':', '/', "
    "'?' and '#' in the user or password, e.g. %40 for '@'"
)


def _hosts_as_parameters(dsn: str) -> str:
    """libpq's URL naming several hosts (``postgresql://USER@H1:P1,H2:P2/DB``), which
    SQLAlchemy does not parse, as the URL libpq takes it for: its hosts and ports in
    ``host=H1,H2&port=P1,P2`` parameters (a host without a port: an empty one, libpq's
    default). Any other DSN comes back as it is."""
    scheme, rest = dsn.split("://", 1)
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    user, at, hostspec = authority.partition("@")
    if not at:
        user, hostspec = "", authority
    if "," not in hostspec or "@" in hostspec:
        return dsn
    hosts, ports = [], []
    for entry in hostspec.split(","):
        if entry.startswith("["):  # an IPv6 address: [::1]:5432
            host, bracket, port = entry[1:].partition("]")
            if not bracket or (port and not port.startswith(":")):
                raise ConfigError(_UNPARSABLE_HOST)
            port = port[1:]
        else:
            host, _, port = entry.partition(":")
        if not port.isdigit() and port != "":
            raise ConfigError(_UNPARSABLE_HOST)
        hosts.append(host)
        ports.append(port)
    path, _, query = tail.partition("?")
    if path.startswith("#"):  # no database, a fragment: leave it where it was
        path, query = "", tail
    given = {p.split("=", 1)[0] for p in query.split("#", 1)[0].split("&")}
    if given & {"host", "hostaddr", "port"}:
        raise ConfigError(
            "invalid DSN: it names several hosts both before the database and in its "
            "host=, hostaddr= or port= parameters: name them in one place"
        )
    params = f"host={','.join(hosts)}" + (f"&port={','.join(ports)}" if any(ports) else "")
    return f"{scheme}://{user}{at}{path}?{params}" + (f"&{query}" if query else "")


def parse_dsn(dsn: str) -> URL:
    """Accept ``postgresql://``, ``postgres://`` and ``postgresql+psycopg://`` DSNs, without
    the whitespace around them (a secret file's final newline, a pasted space)."""
    dsn = dsn.strip()
    if not dsn or "://" not in dsn:
        raise ConfigError(  # not echoed: a keyword string ('host=... password=...') holds secrets
            "invalid DSN: expected a URL, postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME "
            "(libpq's keyword form 'host=... dbname=...' is not accepted; set MQSTORE_DSN "
            "or --dsn)"
        )
    scheme = dsn.split("://", 1)[0]
    if scheme not in _SCHEMES:
        raise ConfigError(
            f"invalid DSN scheme {scheme!r}: mqstore runs on PostgreSQL; "
            "use postgresql://... or postgresql+psycopg://..."
        )
    if scheme == "postgres":
        dsn = "postgresql" + dsn[len("postgres") :]
    dsn = _hosts_as_parameters(dsn)
    try:
        url = make_url(dsn)
        _ = url.port  # a non-number raises (here or in make_url)
    except (ArgumentError, ValueError):  # not echoed: without @HOST the "port" is the password
        raise ConfigError(_UNPARSABLE_HOST) from None
    if "@" in (url.host or ""):  # not echoed: a raw '@' in the password puts its rest here
        raise ConfigError(_UNPARSABLE_HOST)
    return url.set(drivername="postgresql+psycopg")


def _secret_parameters() -> frozenset[str]:
    """libpq's connection parameters whose values are secrets: those it shows as ``*``
    (password, sslpassword, oauth_client_secret in libpq 18), and any newer ones the
    installed libpq marks so. ``passfile``, ``sslkey`` and the like are paths, no secrets."""
    known = {"password", "sslpassword", "oauth_client_secret"}
    try:
        found = {
            o.keyword.decode() for o in psycopg.pq.Conninfo.get_defaults() if o.dispchar == b"*"
        }
    except (psycopg.Error, AttributeError, UnicodeDecodeError):  # e.g. no libpq to ask
        found = set()
    return frozenset(known | found)


#: Query parameters of a DSN that :func:`redact` hides (libpq's secret parameters).
SECRET_PARAMETERS = _secret_parameters()


def redact(dsn: str | URL) -> str:
    """The DSN with its password and libpq's other secret parameters (``?sslpassword=``...)
    hidden, for messages and logs."""
    try:
        url = dsn if isinstance(dsn, URL) else make_url(dsn)
    except (ArgumentError, ValueError):
        return "<unparsable DSN>"
    hidden = {k: "***" for k in url.query if k in SECRET_PARAMETERS}
    if hidden:  # ?password=... is libpq's too
        url = url.update_query_dict(hidden)
    if url.drivername == "postgresql+psycopg":  # the driver suffix is ours, not the user's
        url = url.set(drivername="postgresql")
    return url.render_as_string(hide_password=True)


def libpq_dsn(dsn: str | URL) -> str:
    """The DSN in the form psycopg and libpq accept (no ``+psycopg``)."""
    url = parse_dsn(dsn) if isinstance(dsn, str) else dsn
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


#: libpq settings that notice a database host gone from the network in seconds, not after
#: TCP's retransmissions give up (about 15 minutes on Linux): a connect waits at most 10 s,
#: an idle connection is probed after 10 s, and unacknowledged data fails it after 30 s.
#: A DSN that sets one of them (``?connect_timeout=...``) keeps its own value.
NETWORK_TIMEOUTS: dict[str, int] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}


#: The ``application_name`` mqstore's sessions show in ``pg_stat_activity`` unless the DSN
#: (or ``PGAPPNAME``) names one; a master's lease guard session names itself apart.
APPLICATION_NAME = "mqstore"


#: Connections an engine of :func:`create_engine` keeps open (its pool); it opens as many
#: more at peaks, so one mqstore process (a broker, or a command) holds up to twice these.
POOL_SIZE = 8


def create_engine(dsn: str, *, pool_size: int = POOL_SIZE, **kwargs: object) -> Engine:
    """An engine on psycopg 3; raises :class:`ConfigError` for a bad DSN.

    Its connections never prepare statements on their own (psycopg would after five runs of
    one statement): an unnamed statement is planned for its parameters every time, where a
    prepared one may be switched by PostgreSQL to a generic plan that was made while a table
    was empty and scans it whole once it has grown (tests/integration/test_plan_caching.py).
    The store's commits prepare theirs explicitly, with custom plans
    (:mod:`mqstore.store.commit_connections`).
    """
    url = parse_dsn(dsn)
    connect_args: dict[str, object] = {"prepare_threshold": None}
    connect_args |= {k: v for k, v in NETWORK_TIMEOUTS.items() if k not in url.query}
    if "application_name" not in url.query and "PGAPPNAME" not in os.environ:
        connect_args["application_name"] = APPLICATION_NAME
    try:
        return sa.create_engine(
            url,
            pool_size=pool_size,
            max_overflow=pool_size,
            pool_pre_ping=False,  # a round trip per checkout; dead ones are invalidated on error
            connect_args=connect_args,
            # an error's text never carries a statement's values: message bodies and
            # properties would reach logs and terminals with it
            **{"hide_parameters": True, **kwargs},
        )
    except (ArgumentError, ValueError) as exc:  # e.g. ?port=abc, which the URL leaves alone
        raise ConfigError(f"invalid DSN {redact(url)}: {exc}; fix MQSTORE_DSN or --dsn") from None


#: SQLSTATE of a lock that ``NOWAIT`` or ``lock_timeout`` did not wait for.
LOCK_NOT_AVAILABLE = "55P03"


def sqlstate(exc: DBAPIError) -> str:
    """PostgreSQL's SQLSTATE of a driver error ("" when it carries none)."""
    return str(getattr(exc.orig, "sqlstate", None) or "")


#: SQLSTATEs of a statement naming a column (42703) or table (42P01) the database lacks.
UNDEFINED_OBJECT_STATES = ("42703", "42P01")


def schema_differs(detail: str) -> SchemaError:
    """The one-line refusal of a database whose tables are not what mqstore needs;
    ``detail`` says what is missing."""
    return SchemaError(
        f"the database schema differs from what mqstore expects ({detail}): run "
        "`mqstore db check` to see the differences"
    )


def undefined_object(exc: DBAPIError) -> str | None:
    """PostgreSQL's first line for a statement naming a column or table the database lacks
    (``column activemq_lock.broker_name does not exist``), else None."""
    if sqlstate(exc) not in UNDEFINED_OBJECT_STATES:
        return None
    lines = str(exc.orig).splitlines()
    return lines[0] if lines else type(exc.orig).__name__


#: Refusals of one statement, not of the connection (it stays usable), by SQLSTATE: what
#: to do. Store reads report them as an unavailable database, in these words.
STATEMENT_ADVICE = {
    "25006": "the database is read-only (a hot standby, or default_transaction_read_only): "
    "point the DSN at the primary",
    "57014": "the statement was cancelled, by the role's statement_timeout or an "
    "administrator: run it again, with a longer one if need be "
    "(options=-cstatement_timeout=0 in the DSN)",
    LOCK_NOT_AVAILABLE: "another session holds a lock on a table it needs (a broker or a "
    "migration): run it again when that is done, or with a longer lock_timeout",
}

#: How libpq and the server word the end of an established connection.
_LOST = (
    "server closed the connection",
    "terminating connection",
    "connection to server was lost",
    "SSL connection has been closed",
    "consuming input failed",
    "connection is closed",
)


def _query_value(url: URL, key: str) -> str | None:
    value = url.query.get(key)
    if isinstance(value, tuple):  # given twice: libpq takes the last
        value = value[-1] if value else None
    return value or None


def target(url: URL) -> str:
    """``HOST:PORT`` a DSN connects to, as libpq finds them: in the URL, else its ``host``
    (or ``hostaddr``) and ``port`` parameters, else ``PGHOST`` and ``PGPORT``, else the
    local socket and 5432."""
    host = (
        url.host
        or _query_value(url, "host")
        or _query_value(url, "hostaddr")
        or os.environ.get("PGHOST")
        or os.environ.get("PGHOSTADDR")
        or "local socket"
    )
    port = str(url.port or _query_value(url, "port") or os.environ.get("PGPORT") or 5432)
    if "," in host:  # several hosts: each with its port (libpq's default for an empty one)
        ports = port.split(",")
        return ",".join(
            f"{h or 'local socket'}:{(ports[i] if i < len(ports) else ports[-1]) or 5432}"
            if len(ports) > 1
            else f"{h or 'local socket'}:{port or 5432}"
            for i, h in enumerate(host.split(","))
        )
    return f"{host}:{port}"


#: SQLSTATE of a connection the server turned away for want of a free slot.
TOO_MANY_CONNECTIONS = "53300"


def _slots_used_up(exc: BaseException, detail: str, url: URL, where: str) -> str | None:
    """What to do about a connection refused for want of a slot (SQLSTATE 53300): the role's
    or the database's CONNECTION LIMIT, or the server's max_connections, is reached; libpq
    gives no SQLSTATE for a refused connection, so its words tell which. None for others."""
    state = sqlstate(exc) if isinstance(exc, DBAPIError) else ""
    state = state or str(getattr(exc, "sqlstate", None) or "")
    peak = (
        f"each mqstore broker holds up to {2 * POOL_SIZE} connections (a pool of "
        f"{POOL_SIZE}, as many more at peaks)"
    )
    if "too many connections for role" in detail:
        return (
            f"PostgreSQL at {where} refused a connection ({detail}): role {url.username!r} "
            "has used up its CONNECTION LIMIT: wait for its sessions to end, end idle ones "
            "(pg_stat_activity), or raise it (ALTER ROLE ... CONNECTION LIMIT n); " + peak
        )
    if "too many connections for database" in detail:
        return (
            f"PostgreSQL at {where} refused a connection ({detail}): database "
            f"{url.database!r} has used up its CONNECTION LIMIT: wait for its sessions to "
            "end, end idle ones (pg_stat_activity), or raise it (ALTER DATABASE ... "
            "CONNECTION LIMIT n); " + peak
        )
    if (
        state == TOO_MANY_CONNECTIONS
        or "too many clients" in detail
        or "remaining connection slots are reserved" in detail
    ):
        return (
            f"PostgreSQL at {where} refused a connection ({detail}): the server's "
            "max_connections is used up (the last superuser_reserved_connections are kept "
            "for superusers): wait for sessions to end, end idle ones (pg_stat_activity), "
            "run fewer brokers or clients against it, or raise max_connections (a server "
            "restart); " + peak
        )
    return None


def describe_connect_error(exc: BaseException, url: URL) -> str:
    """Turn a driver's connection failure, or a statement's refusal that is no fault of
    the connection (:data:`STATEMENT_ADVICE`), into one line that says what to fix."""
    raw = str(getattr(exc, "orig", exc) or exc).strip().splitlines()
    detail = raw[0] if raw else type(exc).__name__
    if isinstance(exc, DBAPIError) and (advice := STATEMENT_ADVICE.get(sqlstate(exc))):
        return f"{detail}: {advice}"
    where = target(url)
    if "does not exist" in detail and "database" in detail:
        return (
            f"database {url.database!r} does not exist on {where}: create it "
            f"(createdb {url.database}) or fix the DSN ({redact(url)})"
        )
    if "password authentication failed" in detail or "no password supplied" in detail:
        return f"PostgreSQL at {where} refused user {url.username!r}: check the DSN's credentials"
    if "role" in detail and "does not exist" in detail:
        return f"PostgreSQL at {where} has no role {url.username!r}: fix the DSN's user"
    if (slots := _slots_used_up(exc, detail, url, where)) is not None:
        return slots
    if any(sign in detail for sign in _LOST):
        return (
            f"lost the connection to PostgreSQL at {where} ({detail}): the server restarted "
            "or the network failed"
        )
    return (
        f"cannot connect to PostgreSQL at {where} ({detail}): is the server running "
        f"and the DSN right? ({redact(url)})"
    )


def check_connection(engine: Engine) -> None:
    """Open one connection, or raise :class:`DatabaseUnavailableError` with a clear message."""
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except (OperationalError, DBAPIError, psycopg.Error) as exc:
        raise DatabaseUnavailableError(describe_connect_error(exc, engine.url)) from None


def translate_db_errors(url: URL, action: Callable[[], T]) -> T:
    """Run ``action``; a lost or refused connection becomes :class:`DatabaseUnavailableError`."""
    try:
        return action()
    except OperationalError as exc:
        raise DatabaseUnavailableError(describe_connect_error(exc, url)) from None


def hold_advisory_lock(conn: Connection, key: str) -> None:
    """Wait for the transaction-level advisory lock named ``key``; it is held until
    ``conn``'s transaction ends, so callers with one key take turns."""
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"), {"key": key})
