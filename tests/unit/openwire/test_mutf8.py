"""Java modified UTF-8: NUL as C0 80, supplementary characters as surrogate pairs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqstore.openwire import DecodeError, decode_mutf8, encode_mutf8

ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=())


def _java_view(text: str) -> str:
    """What a Java String holding ``text``'s UTF-16 units reads back as in Python."""
    return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")


@pytest.mark.parametrize(
    ("text", "raw"),
    [
        ("", b""),
        ("abc", b"abc"),
        ("\x00", b"\xc0\x80"),
        ("a\x00b", b"a\xc0\x80b"),
        ("é", b"\xc3\xa9"),
        ("✓", b"\xe2\x9c\x93"),
        ("\U0001f600", b"\xed\xa0\xbd\xed\xb8\x80"),
        ("\ud800", b"\xed\xa0\x80"),  # a lone surrogate is legal in a Java String
        ("x\U0010ffff\x00", b"x\xed\xaf\xbf\xed\xbf\xbf\xc0\x80"),
    ],
)
def test_known_vectors(text: str, raw: bytes) -> None:
    assert encode_mutf8(text) == raw
    assert decode_mutf8(raw) == text


@pytest.mark.parametrize(
    ("raw", "offset"),
    [
        (b"a\x00", 1),  # raw NUL: Java never writes it
        (b"\xf0\x9f\x98\x80", 0),  # 4-byte UTF-8 form
        (b"ab\xc0\x81", 2),  # overlong other than C0 80
        (b"\xc3", 0),  # truncated sequence
        (b"\xc0\x80\xc3(", 2),  # offset counts original bytes after a C0 80
        (b"\xff", 0),
    ],
)
def test_invalid_input_raises_decode_error_at_offset(raw: bytes, offset: int) -> None:
    with pytest.raises(DecodeError) as info:
        decode_mutf8(raw, 100)
    assert info.value.offset == 100 + offset
    assert "modified UTF-8" in str(info.value)


@given(st.text(alphabet=ANY_CHAR, max_size=50))
def test_round_trip_any_string(text: str) -> None:
    raw = encode_mutf8(text)
    assert b"\x00" not in raw and not any(b >= 0xF0 for b in raw)
    assert decode_mutf8(raw) == _java_view(text)
    assert encode_mutf8(decode_mutf8(raw)) == raw


@given(st.binary(max_size=40))
def test_random_bytes_decode_or_raise(raw: bytes) -> None:
    try:
        text = decode_mutf8(raw)
    except DecodeError:
        return
    assert encode_mutf8(text) == raw
