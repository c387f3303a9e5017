"""Edge cases where the encoder, the decoder and the columnar summary must agree."""

from __future__ import annotations

from typing import Any

import pytest

from mqstore.openwire import (
    DecodeError,
    Destination,
    EncodeError,
    Message,
    MessageKind,
    decode,
    decode_map,
    encode,
    encode_map,
    map_message,
    text_message,
)
from mqstore.openwire.columnar import IDENTITY_FIELDS, SUMMARY_FIELDS, summarize

IDS = {"destination": "queue://Q", "producer_id": "ID:h-1-1-1:1:1", "sequence": 1, "timestamp": 1}


def test_summary_declines_a_blob_frame_without_its_blob_fields() -> None:
    """A type-29 frame must end with remoteBlobUrl, mimeType and deletedByBroker:
    decode() refuses one cut before them, and summarize() hands it to the full decoder."""
    frame = bytearray(encode(text_message("x", **IDS)))
    frame[4] = MessageKind.BLOB
    with pytest.raises(DecodeError, match="remoteBlobUrl"):
        decode(bytes(frame))
    declined: list[bytes] = []

    def slow(data: bytes) -> dict[str, Any]:
        declined.append(data)
        return dict.fromkeys(SUMMARY_FIELDS + IDENTITY_FIELDS) | {"decode_error": "refused"}

    cols = summarize([bytes(frame)], slow)
    assert declined == [bytes(frame)]
    assert cols["decode_error"] == ["refused"]


@pytest.mark.parametrize(
    "keys",
    [
        ("\ud83d\ude00", "\U0001f600"),  # a surrogate pair and the character it encodes
        ("k\ud83d\ude00", "k\U0001f600"),
    ],
)
def test_map_keys_that_are_one_java_string_are_refused(keys: tuple[str, str]) -> None:
    """Java sees one String for both keys: the map could not be read back (duplicate key)."""
    entries = dict.fromkeys(keys, 1)
    with pytest.raises(EncodeError, match="same Java string"):
        encode_map(entries)
    with pytest.raises(EncodeError, match="same Java string"):
        text_message("t", properties=entries, **IDS)
    with pytest.raises(EncodeError, match="same Java string"):
        map_message(entries, **IDS)


def test_map_keys_with_surrogates_that_differ_still_encode() -> None:
    entries = {chr(0xD83D): 1, chr(0xDE00): 2, "\U0001f600": 3, "\ud7ff": 4, "a": 5}
    assert decode_map(encode_map(entries)) == entries


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("correlation_id", 5),
        ("type", b"bytes"),
        ("content", "text, not bytes"),
        ("marshalled_properties", "x"),
        ("destination", "queue://Q"),
        ("reply_to", Destination(5, "Q")),  # type: ignore[arg-type]
        ("kind", 99),
    ],
)
def test_wrong_field_types_raise_encode_error_naming_the_field(field: str, value: Any) -> None:
    msg = Message(kind=MessageKind.TEXT).replace(**{field: value})
    with pytest.raises(EncodeError, match=f"cannot encode message field {field}: "):
        encode(msg)


@pytest.mark.parametrize(
    "field", ["response_required", "received_by_dfbridge", "droppable", "deleted_by_broker"]
)
def test_truthy_flags_encode_as_booleans_decode_accepts(field: str) -> None:
    msg = Message(kind=MessageKind.BLOB).replace(**{field: 2})
    back = decode(encode(msg))
    assert getattr(back, field) is True
    assert encode(back) == encode(msg)
