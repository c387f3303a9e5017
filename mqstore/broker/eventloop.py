"""The event loop the broker runs on: uvloop when it is installed, else asyncio's own.

uvloop (libuv) spends about a sixth less CPU per message than asyncio's selector loop on
this broker's STOMP traffic (``benchmarks/README.md``); both behave the same for it.
``MQSTORE_EVENT_LOOP=asyncio`` picks asyncio's loop explicitly.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

T = TypeVar("T")
LoopKind = Literal["auto", "uvloop", "asyncio"]


def resolve(kind: LoopKind = "auto") -> Literal["uvloop", "asyncio"]:
    """The loop ``kind`` stands for here; ``uvloop`` when asked for but not installed fails."""
    available = importlib.util.find_spec("uvloop") is not None
    if kind == "uvloop" and not available:
        raise RuntimeError(
            "event loop 'uvloop' was asked for but uvloop is not installed; "
            "run `pip install uvloop` or set MQSTORE_EVENT_LOOP=asyncio"
        )
    if kind == "asyncio" or not available:
        return "asyncio"
    return "uvloop"


def new_event_loop(kind: LoopKind = "auto") -> asyncio.AbstractEventLoop:
    """A fresh event loop of ``kind``."""
    if resolve(kind) == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(main: Coroutine[Any, Any, T], kind: LoopKind = "auto") -> T:
    """``asyncio.run(main)`` on a loop of ``kind``."""
    with asyncio.Runner(loop_factory=lambda: new_event_loop(kind)) as runner:
        return runner.run(main)
