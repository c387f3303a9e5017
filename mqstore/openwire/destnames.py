"""Destination names ActiveMQ can read back.

Unmarshalling a stored message calls ActiveMQ 5.17's ``ActiveMQDestination.setPhysicalName``
for its destination, originalDestination and replyTo; it throws for some names, and then
the whole row cannot be loaded. :func:`name_problem` says which (checked against it).
"""

from __future__ import annotations

import re

#: What Java's ``String.trim()`` strips: every char up to U+0020.
JAVA_BLANK = "".join(map(chr, range(33)))
#: Prefixes a part of a composite name (``a,topic://b``) may carry.
_PREFIXES = ("queue://", "topic://", "temp-queue://", "temp-topic://")
#: A ``%`` that does not start a two-hex-digit escape (``URLDecoder`` throws; it also takes
#: a few odd escapes such as ``%+1``, refused here).
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def name_problem(name: str | None) -> str | None:
    """Why ActiveMQ could not read a destination named ``name``; None if it can.

    As ``setPhysicalName``: the name is trimmed and must not be empty; each part of a
    composite name, less a ``queue://``-style prefix, must not be blank either; in the
    options after the last ``?``, each ``key=value`` must be properly %-encoded.
    """
    if name is None:
        return "no name (null)"
    name = name.strip(JAVA_BLANK)
    if not name:
        return "a blank name"
    base, question, options = name.partition("?")
    if question:
        for option in options[options.rfind("?") + 1 :].split("&"):
            if "=" in option and _BAD_ESCAPE.search(option):
                return f"option {option!r} is not properly %-encoded"
    if "," in base:
        for part in (raw.strip(JAVA_BLANK) for raw in base.split(",")):
            for prefix in _PREFIXES:
                if part.startswith(prefix) and not part[len(prefix) :].strip(JAVA_BLANK):
                    return f"composite part {part!r} has no name"
    return None
