"""Decode/encode throughput of the OpenWire codec on one core.

Workload: 1 KiB TextMessages with 5 properties (string, int, long, boolean, double),
shaped like what ActiveMQ's JDBC store holds. Run: ``python benchmarks/codec_bench.py``.

The last cases are the audit's decoding of one Arrow batch (``mqstore audit``): the decoded
columns without bodies, the key inside ``MSG`` (``container``, ``msgid_prod``,
``msgid_seq``) read by ``decode(lazy=True)`` per row as a pass of its own, and both from
the one columnar pass the audit runs (``decode_columns(..., identity=True)``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from mqstore.openwire import DecodeError, JInt, JLong, decode, encode, text_message
from mqstore.openwire.columnar import summarize


def _frames(count: int) -> list[bytes]:
    body = ("benchmark payload " * 60)[:1024]
    return [
        encode(
            text_message(
                body,
                destination="queue://BENCH.Q",
                producer_id="ID:bench-host-40123-1795306854999-1:1:1:1",
                sequence=i + 1,
                broker_sequence_id=1000 + i,
                timestamp=1795306859007 + i,
                properties={
                    "str_prop": f"value-{i}",
                    "int_prop": JInt(i),
                    "long_prop": JLong(1234567890123 + i),
                    "bool_prop": i % 2 == 0,
                    "double_prop": 2.5,
                },
            )
        )
        for i in range(count)
    ]


def _rate(fn: Callable[[], None], ops: int, seconds: float) -> float:
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        fn()
        best = max(best, ops / (time.perf_counter() - t0))
    return best


def audit_cases(frames: list[bytes]) -> list[tuple[str, Callable[[], None]]]:
    """The audit's decoding of ``frames`` as one Arrow batch, in its parts (see above)."""
    from spark_etl.decode import decode_columns, utf8_strings

    msgs = pa.array(frames, pa.binary())

    def columns() -> None:
        decode_columns(msgs, bodies=False)

    def header_key() -> None:
        containers: list[str | None] = []
        producers: list[str | None] = []
        sequences: list[int | None] = []
        for frame in msgs.to_pylist():
            try:
                msg = None if frame is None else decode(frame, lazy=True)
            except (DecodeError, ValueError, IndexError, OverflowError):
                msg = None
            containers.append(None if msg is None else msg.container)
            producers.append(None if msg is None else msg.msgid_prod)
            sequences.append(None if msg is None else msg.msgid_seq)
        pa.array(utf8_strings(containers), pa.string())
        pa.array(utf8_strings(producers), pa.string())
        pa.array(sequences, pa.int64())

    def columns_and_key() -> None:
        decode_columns(msgs, bodies=False, identity=True)

    return [
        ("audit: Arrow columns, no bodies", columns),
        ("audit: key by decode(lazy=True) per row", header_key),
        ("audit: Arrow columns + key, one pass", columns_and_key),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=2.0, help="time per case")
    args = parser.parse_args()
    frames = _frames(args.messages)
    messages = [decode(f) for f in frames]
    n = len(frames)

    def decode_all() -> None:
        for f in frames:
            decode(f)

    def decode_lazy() -> None:
        for f in frames:
            decode(f, lazy=True)

    def decode_views() -> None:
        for f in frames:
            m = decode(f, lazy=True)
            m.properties  # noqa: B018
            m.text  # noqa: B018

    def declined(frame: bytes) -> dict[str, Any]:
        raise AssertionError("every benchmark frame takes the columnar fast path")

    def columns_text() -> None:
        summarize(frames, declined)

    def columns_spans() -> None:
        summarize(frames, declined, text_spans=True)

    def encode_all() -> None:
        for m in messages:
            encode(m)

    cases = [
        ("decode (eager: headers + properties + text)", decode_all),
        ("decode (lazy: headers only)", decode_lazy),
        ("decode lazy, then read properties + text", decode_views),
        ("summarize (columnar: headers, properties, text)", columns_text),
        ("summarize, text left as spans (Spark path)", columns_spans),
        ("encode", encode_all),
        *audit_cases(frames),
    ]
    print(f"{len(frames[0])}-byte frames, 1 KiB text body, 5 properties, best of {args.seconds}s")
    print(f"{'case':<50} {'msgs/s':>10} {'us/msg':>8}")
    for name, fn in cases:
        rate = _rate(fn, n, args.seconds)
        print(f"{name:<50} {rate:>10,.0f} {1e6 / rate:>8.1f}")


if __name__ == "__main__":
    main()
