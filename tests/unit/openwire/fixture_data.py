"""Rows of the ActiveMQ 5.17.2 fixture (data.sql) and ActiveMQ's own decoding of them."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SHARED = Path(os.environ.get("MQSTORE_SHARED_DIR", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures" / "activemq-5.17-pg"

_INSERT = re.compile(
    r"INSERT INTO public\.activemq_msgs VALUES \((\d+), '([^']*)', '([^']*)', (\d+), (\d+), "
    r"'\\x([0-9a-f]+)', (\d+), (NULL|'[^']*')\);"
)


@dataclass
class Row:
    """One ACTIVEMQ_MSGS row plus the matching ROW block of decoded-by-activemq-classes.txt."""

    id: int
    container: str
    msgid_prod: str
    msgid_seq: int
    expiration: int
    msg: bytes
    priority: int
    header: dict[str, str] = field(default_factory=dict)
    props: list[tuple[str, str, str]] = field(default_factory=list)
    lines: dict[str, str] = field(default_factory=dict)


def available() -> bool:
    """Whether the shared fixture directory is present."""
    return (FIXTURES / "data.sql").is_file()


@cache
def rows() -> tuple[Row, ...]:
    """All message rows, ordered by ID."""
    out: dict[int, Row] = {}
    for line in (FIXTURES / "data.sql").read_text().splitlines():
        m = _INSERT.match(line)
        if m:
            row_id = int(m[1])
            out[row_id] = Row(
                row_id, m[2], m[3], int(m[4]), int(m[5]), bytes.fromhex(m[6]), int(m[7])
            )
    current: Row | None = None
    for line in (FIXTURES / "decoded-by-activemq-classes.txt").read_text().splitlines():
        if line.startswith("ROW "):
            current = out[int(line.split()[1].split("=")[1])]
        elif current is not None and line.startswith("  type="):
            current.header = dict(re.findall(r"(\w+)=(\S+)", line))
        elif current is not None and line.startswith("  prop "):
            pm = re.fullmatch(r"  prop (\S+) = (.*) \((\w+)\)", line)
            assert pm, line
            current.props.append((pm[1], pm[2], pm[3]))
        elif current is not None and line.startswith("  ") and "=" in line:
            key, _, value = line.strip().partition("=")
            current.lines[key] = value
    return tuple(out[k] for k in sorted(out))


def frames() -> list[bytes]:
    """The MSG values of all rows (empty if the fixture is absent)."""
    return [r.msg for r in rows()] if available() else []
