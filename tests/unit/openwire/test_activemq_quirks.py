"""What ActiveMQ 5.17 itself writes and reads, beyond what its Java clients produce:
STOMP text stored as raw UTF-8, ``compress()`` of a BytesMessage, BlobMessage fields,
lone surrogates, and Java's printing of property values."""

from __future__ import annotations

import struct
import tracemalloc
import zlib

import pytest

from mqstore.openwire import (
    DecodeError,
    EncodeError,
    JFloat,
    JInt,
    Message,
    MessageKind,
    decode,
    decode_mutf8,
    encode,
    encode_stream,
    encode_utf8_java,
    replace_lone_surrogates,
    stream_message,
    text_message,
)
from mqstore.openwire.columnar import property_text, summarize
from tests.unit.openwire import activemq_quirks_data as amq

IDS = {"destination": "queue://Q", "producer_id": "ID:h-1-1-1:1:1", "sequence": 1, "timestamp": 1}


# -- F1: text bodies as ActiveMQ's STOMP transport stores them ------------------------------


@pytest.mark.parametrize("name", ["STOMP_EMOJI", "STOMP_TEXT_WITH_NUL"])
def test_stomp_text_reads_as_activemq_sends_it(name: str) -> None:
    frame = getattr(amq, name)
    msg = decode(frame)
    assert msg.text == amq.STOMP_BODIES[name].decode("utf-8")
    assert encode(msg) == frame  # the raw bytes are kept, not re-encoded
    assert decode(frame, lazy=True).text == msg.text


def test_stomp_text_in_the_columnar_summary() -> None:
    frames = [amq.STOMP_EMOJI, amq.STOMP_TEXT_WITH_NUL]
    declined: list[bytes] = []
    cols = summarize(frames, lambda f: declined.append(f) or {})  # type: ignore[func-returns-value]
    assert not declined
    assert cols["text"] == ["hi \U0001f600 there", "a\x00b"]
    assert cols["decode_error"] == [None, None]


@pytest.mark.parametrize(
    ("raw", "text"),
    [  # ActiveMQ's MarshallingSupport.readUTF8 (and DataInputStream.readUTF) accept these
        (b"a\x00b", "a\x00b"),  # raw NUL
        (b"\xc0\x80", "\x00"),
        (b"\xc1\x81", "A"),  # overlong 2-byte form
        (b"\xe0\x80\x80", "\x00"),  # overlong 3-byte forms
        (b"\xe0\x81\x81", "A"),
        (b"\xe0\x9f\xbfx", "\u07ffx"),
        (b"\xed\xa0\xbd\xed\xb8\x80", "\U0001f600"),  # CESU-8 pair
        (b"\xed\xa0\x80", "\ud800"),  # lone surrogate
        (b"\xe2\x82\xac", "\u20ac"),
        # ... and standard 4-byte UTF-8, which only STOMP-stored text holds
        (b"\xf0\x9f\x98\x80", "\U0001f600"),
        (b"\xf4\x8f\xbf\xbf", "\U0010ffff"),
        (b"\xc0\x80\xf0\x9f\x98\x80\xed\xa0\x80", "\x00\U0001f600\ud800"),
    ],
)
def test_lenient_text_accepts_what_activemq_reads(raw: bytes, text: str) -> None:
    assert decode_mutf8(raw, lenient=True) == text
    content = struct.pack(">i", len(raw)) + raw
    assert decode(encode(Message(kind=MessageKind.TEXT, content=content))).text == text


@pytest.mark.parametrize(
    ("raw", "offset"),
    [  # readUTF8 refuses these too (so do 4-byte forms that are not standard UTF-8)
        (b"ab\x80", 2),
        (b"a\xe2\x82", 1),
        (b"\xc0", 0),
        (b"x\xc0A", 1),
        (b"\xf8", 0),
        (b"\xff", 0),
        (b"\xc1\x81\xf0\x80\x80\x80", 2),  # overlong 4-byte form
        (b"\xf4\x90\x80\x80", 0),  # beyond U+10FFFF
        (b"\xf0\x9f\x98", 0),
    ],
)
def test_lenient_text_refuses_what_activemq_refuses(raw: bytes, offset: int) -> None:
    with pytest.raises(DecodeError) as info:
        decode_mutf8(raw, 10, lenient=True)
    assert info.value.offset == 10 + offset


def test_header_strings_stay_strict() -> None:
    with pytest.raises(DecodeError, match="modified UTF-8"):
        decode_mutf8(b"\xf0\x9f\x98\x80")
    with pytest.raises(DecodeError):
        decode(
            encode(text_message("t", correlation_id="c\x00", **IDS)).replace(b"c\xc0\x80", b"c\x00")
        )


# -- F2: compressed bodies as ActiveMQ's compress() writes them -----------------------------


def test_compressed_bytes_from_activemq_compress() -> None:
    msg = decode(amq.STOMP_BYTES_BRIDGE_COMPRESSED)
    assert msg.bytes_body == amq.STOMP_BODIES["STOMP_BYTES_BRIDGE_COMPRESSED"]
    assert len(zlib.decompress((msg.content or b"")[4:])) > 10  # the surplus ActiveMQ ignores
    assert decode(amq.BYTES_EMPTY_COMPRESSED).bytes_body == b""
    for frame in (amq.STOMP_BYTES_BRIDGE_COMPRESSED, amq.BYTES_EMPTY_COMPRESSED):
        assert encode(decode(frame)) == frame


def test_compressed_bytes_edge_cases_read_as_activemq_does() -> None:
    base = Message(kind=MessageKind.BYTES, compressed=True)
    assert decode(encode(base.replace(content=b""))).bytes_body == b""
    with pytest.raises(DecodeError, match="zlib"):  # Java's Inflater checks the header
        decode(encode(base.replace(content=b"\x00\x00\x00\x00garbage")))


def test_compressed_text_reads_only_its_length() -> None:
    """As readUTF8 on an InflaterInputStream: the rest of the stream is never inflated."""
    surplus = zlib.compress(struct.pack(">i", 2) + b"hi" + bytes(50_000_000))
    msg = Message(kind=MessageKind.TEXT, compressed=True, content=surplus)
    tracemalloc.start()
    try:
        assert decode(encode(msg)).text == "hi"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000


def test_inflation_is_bounded_without_doubling() -> None:
    limit = 8 * 1024 * 1024
    bomb = zlib.compress(bytes(100 * 1024 * 1024), 9)
    msg = Message(kind=MessageKind.MAP, compressed=True, content=bomb)
    frame = encode(msg)
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="inflated bytes"):
            decode(frame, max_decompressed=limit)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < limit * 1.5  # the pieces are never joined once over the limit


# -- F6: BlobMessage -----------------------------------------------------------------------


def test_blob_message_fields_round_trip() -> None:
    blob = decode(amq.BLOB)
    assert blob.kind is MessageKind.BLOB
    assert (blob.remote_blob_url, blob.mime_type, blob.deleted_by_broker) == (
        "http://blobs.example/file-1",
        "application/pdf",
        False,
    )
    assert encode(blob) == amq.BLOB
    deleted = decode(amq.BLOB_DELETED)
    assert deleted.remote_blob_url == "http://blobs.example/f\u00e9-2"
    assert deleted.mime_type == "application/octet-stream"  # getMimeType()'s default
    assert deleted.deleted_by_broker
    assert encode(deleted) == amq.BLOB_DELETED
    # the fields are the only difference between the two frames' tails
    changed = blob.replace(remote_blob_url=deleted.remote_blob_url, deleted_by_broker=True)
    assert encode(changed.replace(mime_type=deleted.mime_type)).endswith(amq.BLOB_DELETED[-61:])


def test_blob_fields_belong_to_blob_messages() -> None:
    with pytest.raises(EncodeError, match="BlobMessage"):
        encode(Message(kind=MessageKind.TEXT, remote_blob_url="http://x"))
    with pytest.raises(DecodeError, match="truncated"):
        decode(struct.pack(">i", len(amq.BLOB) - 10) + amq.BLOB[4:-6])


# -- F4: StreamMessage values --------------------------------------------------------------


@pytest.mark.parametrize("values", [["before", {"a": 1}], [[1, 2]], [(1,)]])
def test_stream_message_refuses_maps_and_lists(values: list[object]) -> None:
    with pytest.raises(EncodeError, match="StreamMessage"):
        stream_message(values, **IDS)
    with pytest.raises(EncodeError):
        encode_stream(values)


def test_stream_message_keeps_what_java_can_read() -> None:
    values = ["s", JInt(1), b"\x00", None, True, 2.5, JFloat(0.5)]
    assert decode(encode(stream_message(values, **IDS))).stream_body == values


# -- F3: lone surrogates have a UTF-8 form as Java writes one -------------------------------


def test_lone_surrogates_encode_as_java_does() -> None:
    assert decode(amq.TEXT_LONE).text == "p\ud800q"
    assert encode_utf8_java("p\ud800q") == b"p?q"  # String.getBytes(UTF_8)
    assert encode_utf8_java("\ud83d\ude00 \udc00") == "\U0001f600 ?".encode()
    assert replace_lone_surrogates("p\ud800q\udfff") == "p?q?"
    plain = "ünï \U0001f600"
    assert replace_lone_surrogates(plain) is plain


# -- F5: property values as Java prints them -----------------------------------------------


def test_property_text_is_java_string_value_of() -> None:
    props = decode(amq.ALLPROPS).properties
    for name, java in amq.ALLPROPS_JAVA_TEXT.items():
        assert property_text(props[name]) == java, name


def test_numbers_print_as_java_does() -> None:
    for kind, bits, java in amq.JAVA_NUMBER_TEXT:
        if kind == "F":
            value: float = JFloat(struct.unpack(">f", bytes.fromhex(bits))[0])
        else:
            value = struct.unpack(">d", bytes.fromhex(bits))[0]
        assert property_text(value) == java, (kind, bits)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (JFloat(struct.unpack(">f", bytes.fromhex("4c7d6df0"))[0]), "6.643501E7"),  # 66435008f
        (5e-324, "4.9E-324"),  # Double.MIN_VALUE: two digits, the closer
        (1e-323, "9.9E-324"),
        (JFloat(1.401298464324817e-45), "1.4E-45"),  # Float.MIN_VALUE
        (float("-inf"), "-Infinity"),
        (JFloat(-0.0), "-0.0"),
    ],
)
def test_shortest_forms_of_java_19(value: float, text: str) -> None:
    """Java 19+ prints the shortest decimal; Java 17 sometimes printed more digits."""
    assert property_text(value) == text


def test_nested_values_print_as_hash_map_and_list_do() -> None:
    keys = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]
    keys += ["kappa", "lambda", "mu", "nu"]
    nested = {k: JInt(i) for i, k in enumerate(keys)}
    props = decode(encode(text_message("t", properties={"m": nested}, **IDS))).properties
    # Java 17 prints the HashMap ActiveMQ's unmarshalPrimitiveMap builds in this order:
    assert property_text(props["m"]) == (
        "{zeta=5, iota=8, nu=12, delta=3, mu=11, theta=7, epsilon=4, lambda=10, eta=6,"
        " alpha=0, kappa=9, beta=1, gamma=2}"
    )
    assert property_text([JFloat(1.1), None, "x", [True]]) == "[1.1, null, x, [true]]"


@pytest.mark.parametrize(
    ("count", "java"),
    [  # printed by ActiveMQ 5.17 (Java 17) for the nested map of the first ``count`` keys
        (8, "{a0=0, a@=1, aP=2, a`=3, ap=4, b1=5, bA=6, bQ=7}"),
        (9, "{a0=0, aP=2, ap=4, b1=5, bQ=7, a@=1, a`=3, bA=6, ba=8}"),
        (10, "{a0=0, aP=2, ap=4, b1=5, bQ=7, bq=9, a@=1, a`=3, bA=6, ba=8}"),
        (12, "{a0=0, aP=2, ap=4, b1=5, bQ=7, bq=9, c2=10, a@=1, a`=3, bA=6, ba=8, cB=11}"),
    ],
)
def test_colliding_keys_print_as_hash_map_does(count: int, java: str) -> None:
    """Keys whose String.hashCode agree in the low 4 bits share a bucket of the 16-slot
    table: the 9th in one bucket makes HashMap double a table under 64 slots."""
    keys = ["a0", "a@", "aP", "a`", "ap", "b1", "bA", "bQ", "ba", "bq", "c2", "cB"][:count]
    nested = {k: JInt(i) for i, k in enumerate(keys)}
    props = decode(encode(text_message("t", properties={"m": nested}, **IDS))).properties
    assert property_text(props["m"]) == java
