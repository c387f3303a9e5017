"""Java's ``String.valueOf`` of property values: ``Double``/``Float.toString`` and the
``toString`` of the ``HashMap``/``ArrayList`` ActiveMQ decodes nested values into.

Numbers print the shortest decimal that reads back as the same double (float), as
specified for ``Double.toString`` since Java 19 (older JDKs print a longer form of a few
values): plain for 10^-3 <= |x| < 10^7 with at least one fraction digit, else
computerized scientific notation (``1.0E-5``, ``1.23456789E8``).
"""

from __future__ import annotations

import functools
import math
import struct
from collections import Counter
from collections.abc import Mapping
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from fractions import Fraction
from typing import Any

from .primitives import JFloat

_SMALLEST_NORMAL = 2.2250738585072014e-308  # subnormal doubles: repr() may differ from Java
#: (significand bits, exponent of the smallest subnormal) of double and float.
_DOUBLE = (53, -1074)
_FLOAT = (24, -149)
#: ``HashMap``: a bucket of more keys than this is made a tree, or (in a table of fewer
#: slots than the minimum) the table is doubled instead.
_TREEIFY_THRESHOLD = 8
_MIN_TREEIFY_CAPACITY = 64


def java_double(x: float) -> str:
    """``Double.toString(x)``."""
    if 1e-3 <= abs(x) < 1e7:
        return repr(x)  # the same there: shortest digits, plain, at least one fraction digit
    if math.isnan(x) or x == 0 or math.isinf(x):
        return _special(x)
    sign = "-" if x < 0 else ""
    if abs(x) < _SMALLEST_NORMAL:
        return _layout(sign, *_shortest(abs(x), _DOUBLE))
    return _layout(sign, *_repr_digits(repr(abs(x))))


def java_float(x: float) -> str:
    """``Float.toString(x)`` of a float value (held exactly in a Python float)."""
    if math.isnan(x) or x == 0 or math.isinf(x):
        return _special(x)
    return _java_float(x)


@functools.lru_cache(maxsize=1024)
def _java_float(x: float) -> str:
    return _layout("-" if x < 0 else "", *_shortest(abs(x), _FLOAT))


def _special(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"


def _repr_digits(text: str) -> tuple[str, int]:
    """Significant digits and decimal exponent of the first one, from a ``repr()``."""
    mantissa, _, exp = text.partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    significant = digits.lstrip("0")
    first = len(whole) - 1 - (len(digits) - len(significant))
    return significant.rstrip("0") or "0", first + int(exp or 0)


def _layout(sign: str, digits: str, exp: int) -> str:
    """Java's layout of ``d.ddd * 10^exp``: plain for -3 <= exp < 7, else ``d.dddE<exp>``."""
    if -3 <= exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    if 0 <= exp < 7:
        whole = digits[: exp + 1].ljust(exp + 1, "0")
        return f"{sign}{whole}.{digits[exp + 1 :] or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exp}"


def _shortest(x: float, kind: tuple[int, int]) -> tuple[str, int]:
    """Digits and exponent of the shortest decimal that rounds to ``x`` (> 0), exactly.

    Of several, the closest to ``x`` (then the one with an even last digit); when one
    digit would do, Java also weighs the two-digit decimals (``Float.MIN_VALUE`` prints
    as 1.4E-45, not 1.0E-45).
    """
    low, high, closed = _rounding_interval(x, kind)
    top = Decimal(x).adjusted()

    def rounds_to_x(d: Decimal) -> bool:
        f = Fraction(d)
        return low < f < high or (closed and f in (low, high))

    for length in range(1, 18):
        found = [d for d in _around(x, top - length + 1) if rounds_to_x(d)]
        if found:
            if length == 1:
                found += [d for d in _around(x, top - 1) if rounds_to_x(d)]
            exact = Fraction(x)
            best = min(found, key=lambda d: (abs(Fraction(d) - exact), d.as_tuple().digits[-1] % 2))
            return _decimal_digits(best)
    raise AssertionError(f"no decimal rounds to {x!r}")  # pragma: no cover


def _around(x: float, quantum: int) -> set[Decimal]:
    """The multiples of 10^quantum just below and just above ``x``."""
    unit = Decimal(1).scaleb(quantum)
    d = Decimal(x)
    return {d.quantize(unit, ROUND_FLOOR), d.quantize(unit, ROUND_CEILING)} - {Decimal(0)}


def _decimal_digits(d: Decimal) -> tuple[str, int]:
    digits = "".join(map(str, d.as_tuple().digits)).rstrip("0") or "0"
    return digits, d.adjusted()


def _rounding_interval(x: float, kind: tuple[int, int]) -> tuple[Fraction, Fraction, bool]:
    """The reals that round to ``x`` (> 0): low and high bound, and whether they do too
    (round half to even: when ``x``'s significand is even)."""
    bits, min_exp = kind
    exp = max(math.frexp(x)[1] - bits, min_exp)
    ulp = Fraction(2) ** exp
    significand = Fraction(x) / ulp
    below = ulp / 2 if significand == 1 << (bits - 1) and exp > min_exp else ulp
    return Fraction(x) - below / 2, Fraction(x) + ulp / 2, significand.numerator % 2 == 0


def value_of(value: Any) -> str:
    """``String.valueOf`` of a decoded property value (a byte[] as hex, unlike Java)."""
    t = type(value)
    if t is str:
        return value  # type: ignore[no-any-return]
    if value is None:
        return "null"
    if t is bool:
        return "true" if value else "false"
    if t is float:
        return java_double(value)
    if t is JFloat:
        return java_float(value)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, Mapping):
        entries = ", ".join(f"{value_of(k)}={value_of(v)}" for k, v in hash_map_order(value))
        return "{" + entries + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(value_of(v) for v in value) + "]"
    return str(value)


def hash_map_order(entries: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The entries in the order Java iterates the ``HashMap`` ActiveMQ's
    ``unmarshalPrimitiveMap`` builds (``new HashMap(size)``, then each key put in turn).

    A bucket reaching 9 keys doubles a table under 64 slots, as ``HashMap.treeifyBin``
    does; in a larger one it becomes a tree, whose order is not modelled (that takes 9 keys
    agreeing in their low 6 or more hash bits).
    """
    items = list(entries.items())
    hashes = [_bucket_hash(key) for key, _ in items]
    capacity = 1
    while capacity < len(items):
        capacity <<= 1
    threshold = int(capacity * 0.75)
    per_bucket: Counter[int] = Counter()
    for size, h in enumerate(hashes, 1):
        bucket = h & (capacity - 1)
        per_bucket[bucket] += 1
        before = capacity
        if per_bucket[bucket] > _TREEIFY_THRESHOLD and capacity < _MIN_TREEIFY_CAPACITY:
            capacity, threshold = _resize(capacity, threshold)
        if size > threshold:
            capacity, threshold = _resize(capacity, threshold)
        if capacity != before:
            per_bucket = Counter(x & (capacity - 1) for x in hashes[:size])
    mask = capacity - 1
    return [items[i] for i in sorted(range(len(items)), key=lambda i: hashes[i] & mask)]


def _resize(capacity: int, threshold: int) -> tuple[int, int]:
    """``HashMap.resize()`` of a table in use: twice the slots, and the new threshold."""
    if capacity >= 16:
        return capacity * 2, threshold * 2
    return capacity * 2, int(capacity * 2 * 0.75)


def _bucket_hash(key: str) -> int:
    """``HashMap.hash(key)``: ``String.hashCode`` (UTF-16 units) with its high half folded in."""
    units = key.encode("utf-16-be", "surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", units):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h ^ (h >> 16)
