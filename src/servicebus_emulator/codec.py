"""AMQP message sections: split, read and write without touching the bare message.

A transfer's payload is a sequence of described sections. The emulator keeps the bare
message (properties, application properties, body, footer) as the exact bytes the
client sent, and rewrites only the header and message annotations when it delivers, so
that every property reaches a receiver byte for byte.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from proton import Data, Described, symbol, timestamp, ulong

HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78
_BARE = (PROPERTIES, APPLICATION_PROPERTIES, DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER)
_DESCRIPTOR_NAMES = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}


class MessageFormatError(ValueError):
    """The payload is not a sequence of AMQP message sections."""


class Section:
    """One section: its descriptor code and exact bytes; its value is decoded on demand
    (a batch of hundreds of messages needs the bodies' bytes, never their values)."""

    __slots__ = ("_value", "code", "raw")

    def __init__(self, code: int, raw: bytes, value: Any = None, decoded: bool = False) -> None:
        self.code = code
        self.raw = raw
        self._value = value if decoded else _UNDECODED

    @property
    def value(self) -> Any:
        if self._value is _UNDECODED:
            described = decode_value(self.raw)
            self._value = described.value if isinstance(described, Described) else None
        return self._value


_UNDECODED = object()
_LAZY = (APPLICATION_PROPERTIES, AMQP_SEQUENCE, AMQP_VALUE, FOOTER)


def split_sections(payload: bytes) -> list[Section]:
    """Splits an encoded message into its sections.

    Raises:
        MessageFormatError: the bytes are not AMQP message sections.
    """
    sections = []
    offset = 0
    view = bytes(payload)
    while offset < len(view):
        data = Data()
        try:
            consumed = data.decode(view[offset:])
            data.rewind()
            data.next()
            if data.type() != Data.DESCRIBED or consumed <= 0:
                raise MessageFormatError(f"byte {offset} does not start a described section")
            data.enter()
            data.next()
            code = _section_code(read_value(data))
            if code is None:
                raise MessageFormatError(f"unknown section descriptor at byte {offset}")
            raw = view[offset : offset + consumed]
            if code in _LAZY:
                section = Section(code, raw)
            else:
                data.next()
                section = Section(code, raw, read_value(data), decoded=True)
        except MessageFormatError:
            raise
        except Exception as exc:
            raise MessageFormatError(f"undecodable section at byte {offset}: {exc}") from exc
        sections.append(section)
        offset += consumed
    if not sections:
        raise MessageFormatError("empty message")
    return sections


def read_value(data: Data) -> Any:
    """Reads the current value of ``data`` into plain Python objects.

    Proton's own ``get_object`` returns binaries as memoryviews into memory it frees,
    and fails on maps with binary keys (memoryviews do not hash); this walks the value
    and copies binaries out at once.
    """
    kind = data.type()
    if kind == Data.BINARY:
        return bytes(data.get_binary())
    if kind == Data.MAP:
        count = data.get_map()
        out: dict[Any, Any] = {}
        data.enter()
        for _ in range(count // 2):
            data.next()
            key = read_value(data)
            data.next()
            out[key] = read_value(data)
        data.exit()
        return out
    if kind == Data.LIST:
        count = data.get_list()
        items = []
        data.enter()
        for _ in range(count):
            data.next()
            items.append(read_value(data))
        data.exit()
        return items
    if kind == Data.DESCRIBED:
        data.enter()
        data.next()
        descriptor = read_value(data)
        data.next()
        value = read_value(data)
        data.exit()
        return Described(descriptor, value)
    return _detach(data.get_object())


def _detach(value: Any) -> Any:
    """Copies what Proton returns out of its C memory (binaries come as memoryviews)."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, Described):
        return Described(_detach(value.descriptor), _detach(value.value))
    if isinstance(value, dict):
        return {_detach(k): _detach(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_detach(v) for v in value]
    return value


def decode_value(encoded: bytes) -> Any:
    """Decodes one AMQP value (a management request body, for instance)."""
    data = Data()
    data.decode(bytes(encoded))
    data.rewind()
    data.next()
    return read_value(data)


def _section_code(descriptor: Any) -> int | None:
    if isinstance(descriptor, int) and HEADER <= descriptor <= FOOTER:
        return int(descriptor)
    if isinstance(descriptor, str):
        return _DESCRIPTOR_NAMES.get(str(descriptor))
    return None


def split_batch(sections: list[Section]) -> list[tuple[bytes, list[Section]]] | None:
    """The inner messages of a batch (Microsoft's batch format), each as its bytes and
    sections, or None for a plain message.

    Proton does not tell the transfer's message format, so a payload counts as a batch
    when its body is data sections only and every one of them is itself a complete
    encoded message with a bare part. The envelope's other sections do not count either
    way: one SDK copies the first inner message's properties, annotations and
    application properties onto the envelope, and each inner message is still read on
    its own, with its own sections only. A plain message whose body is exactly an encoded
    AMQP message would be mistaken for a batch of one (see the README's known
    differences).
    """
    if any(s.code in (AMQP_VALUE, AMQP_SEQUENCE) for s in sections):
        return None
    bodies = [s.value for s in sections if s.code == DATA]
    if not bodies:
        return None
    inner = []
    for body in bodies:
        try:
            parts = split_sections(bytes(body))
        except MessageFormatError:
            return None
        if not any(p.code in _BARE for p in parts):
            return None
        inner.append((bytes(body), parts))
    return inner


@dataclass
class ParsedMessage:
    """What the broker needs to know about a message, plus its exact bare bytes."""

    bare: bytes
    header: list[Any] = field(default_factory=list)
    annotations: dict[Any, Any] = field(default_factory=dict)
    properties: list[Any] = field(default_factory=list)
    application_properties: dict[Any, Any] | None = None
    body_size: int = 0
    app_section: Section | None = None
    _kept: tuple[bytes, int] | None = field(default=None, init=False, repr=False, compare=False)

    def kept_annotations(self) -> tuple[bytes, int]:
        """The sender's message annotations a delivery keeps (all but those it sets),
        keys as symbols, encoded as map entries (:func:`encoded_map_entries`); once per
        message (``replace`` makes a new message, which encodes its own)."""
        if self._kept is None:
            kept = {
                symbol(str(k)): v
                for k, v in self.annotations.items()
                if str(k) not in _DELIVERY_ANNOTATIONS
            }
            self._kept = encoded_map_entries(kept)
        return self._kept

    def get_application_properties(self) -> dict[Any, Any]:
        """The application properties, decoded on first use."""
        if self.application_properties is None:
            section = self.app_section
            self.application_properties = dict(section.value or {}) if section else {}
        return self.application_properties

    def prop(self, index: int) -> Any:
        """A field of the properties section (0 message-id … 12 reply-to-group-id)."""
        return self.properties[index] if index < len(self.properties) else None

    @property
    def message_id(self) -> Any:
        return self.prop(0)

    @property
    def content_type(self) -> str | None:
        value = self.prop(6)
        return None if value is None else str(value)

    @property
    def session_id(self) -> str | None:
        value = self.prop(10)
        return None if value is None else str(value)

    @property
    def ttl_ms(self) -> int | None:
        """The header's ttl (milliseconds), or None."""
        return int(self.header[2]) if len(self.header) > 2 and self.header[2] is not None else None

    def annotation(self, name: str) -> Any:
        return self.annotations.get(symbol(name), self.annotations.get(name))


def parse_message(payload: bytes) -> ParsedMessage:
    """Reads one (non-batch) message.

    Raises:
        MessageFormatError: the bytes are not an AMQP message.
    """
    return parse_sections(split_sections(payload))


def parse_sections(sections: list[Section]) -> ParsedMessage:
    """Reads an already split message."""
    parsed = ParsedMessage(bare=b"".join(s.raw for s in sections if s.code in _BARE))
    for s in sections:
        if s.code == HEADER:
            parsed.header = list(s.value or [])
        elif s.code == MESSAGE_ANNOTATIONS:
            parsed.annotations = dict(s.value or {})
        elif s.code == PROPERTIES:
            parsed.properties = list(s.value or [])
        elif s.code == APPLICATION_PROPERTIES:
            parsed.app_section = s
        elif s.code in (DATA, AMQP_SEQUENCE, AMQP_VALUE):
            parsed.body_size += len(s.raw)
    return parsed


def encode_header(
    durable: bool, priority: int | None, ttl_ms: int | None, delivery_count: int
) -> bytes:
    """An encoded header section, written byte by byte (every delivery renders one:
    Proton's encoder took half the time of rendering a message)."""
    ttl = _uint_bytes(ttl_ms) if ttl_ms is not None and 0 <= ttl_ms < 2**32 else b"\x40"
    fields = b"".join(
        (
            b"\x41" if durable else b"\x42",
            b"\x50",
            bytes([priority if priority is not None else 4]),
            ttl,
            b"\x41" if delivery_count == 0 else b"\x42",
            _uint_bytes(delivery_count),
        )
    )
    return b"\x00\x53\x70\xc0" + bytes([len(fields) + 1, 5]) + fields


def _uint_bytes(value: int) -> bytes:
    if value == 0:
        return b"\x43"  # uint0
    if value < 256:
        return b"\x52" + bytes([value])  # smalluint
    return b"\x70" + _UINT.pack(value)


def encode_annotations(annotations: dict[Any, Any]) -> bytes:
    """An encoded message-annotations section (keys as symbols)."""
    return _encode(
        Described(ulong(MESSAGE_ANNOTATIONS), {symbol(str(k)): v for k, v in annotations.items()})
    )


def encode_application_properties(properties: dict[Any, Any]) -> bytes:
    """An encoded application-properties section."""
    return _encode(Described(ulong(APPLICATION_PROPERTIES), properties))


def replace_application_properties(bare: bytes, properties: dict[Any, Any]) -> bytes:
    """The bare message with its application-properties section replaced."""
    sections = split_sections(bare)
    out = []
    done = False
    for s in sections:
        if s.code == APPLICATION_PROPERTIES:
            out.append(encode_application_properties(properties))
            done = True
        elif s.code in (DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER) and not done:
            out.append(encode_application_properties(properties))
            out.append(s.raw)
            done = True
        else:
            out.append(s.raw)
    if not done:
        out.append(encode_application_properties(properties))
    return b"".join(out)


def with_message_id(parsed: ParsedMessage, message_id: str) -> ParsedMessage:
    """The message with ``message_id`` in its properties section (added when it has
    none); every other section keeps its bytes."""
    fields = list(parsed.properties) or [None]
    fields[0] = message_id
    section = _encode(Described(ulong(PROPERTIES), fields))
    rest = [s.raw for s in split_sections(parsed.bare) if s.code != PROPERTIES]
    return replace(parsed, bare=section + b"".join(rest), properties=fields)


def ms_timestamp(epoch_ms: int) -> timestamp:
    """An AMQP timestamp."""
    return timestamp(epoch_ms)


def _encode(value: Any) -> bytes:
    data = Data()
    data.put_object(value)
    return data.encode()


def encode_value(value: Any) -> bytes:
    """Any value, AMQP-encoded (for management response bodies)."""
    return _encode(value)


#: The annotations a delivery sets itself (rendered anew each time).
_DELIVERY_ANNOTATIONS = frozenset(
    {
        "x-opt-sequence-number",
        "x-opt-enqueue-sequence-number",
        "x-opt-enqueued-time",
        "x-opt-message-state",
        "x-opt-locked-until",
        "x-opt-deadletter-source",
    }
)


class Delivered(Protocol):
    """What a receiver is told about a stored message besides its own bytes."""

    parsed: ParsedMessage
    seq: int
    enqueued_ms: int
    state: int
    delivery_count: int
    locked_until_ms: int | None
    dead_letter_source: str | None


def render_message(msg: Delivered, entity_path: str) -> bytes:
    """The bytes a receiver gets: a fresh header and annotations, then the bare message.

    The annotations the sender gave are encoded once per message (Proton); those the
    delivery sets (sequence number, enqueued time, state, lock, dead-letter source) are
    written byte by byte after them, in one map."""
    parsed = msg.parsed
    pairs, count = parsed.kept_annotations()
    dynamic = [
        _symbol_bytes("x-opt-sequence-number"),
        _long_bytes(msg.seq),
        _symbol_bytes("x-opt-enqueue-sequence-number"),
        _long_bytes(msg.seq),
        _symbol_bytes("x-opt-enqueued-time"),
        b"\x83" + _LONG.pack(msg.enqueued_ms),
        _symbol_bytes("x-opt-message-state"),
        b"\x71" + _INT.pack(msg.state),
    ]
    if msg.locked_until_ms is not None:
        dynamic += [_symbol_bytes("x-opt-locked-until"), b"\x83" + _LONG.pack(msg.locked_until_ms)]
    if msg.dead_letter_source is not None:
        dynamic += [_symbol_bytes("x-opt-deadletter-source"), _string_bytes(msg.dead_letter_source)]
    entries = pairs + b"".join(dynamic)
    count += len(dynamic)
    annotations = b"\x00\x53\x72\xd1" + _UINT.pack(len(entries) + 4) + _UINT.pack(count) + entries
    durable = bool(parsed.header[0]) if parsed.header else False
    priority = parsed.header[1] if len(parsed.header) > 1 else None
    header = encode_header(durable, priority, parsed.ttl_ms, msg.delivery_count)
    return header + annotations + parsed.bare


def encoded_map_entries(value: dict[Any, Any]) -> tuple[bytes, int]:
    """A map's encoded entries (keys and values one after another, without the map's
    constructor, size and count) and their count (keys plus values)."""
    encoded = _encode(value)
    if encoded[0] == 0xC1:  # map8: size and count one byte each
        return encoded[3:], encoded[2]
    return encoded[9:], int.from_bytes(encoded[5:9], "big")  # map32


_UINT = struct.Struct(">I")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_INT8 = struct.Struct(">b")


def _long_bytes(value: int) -> bytes:
    if -128 <= value < 128:
        return b"\x55" + _INT8.pack(value)  # smalllong
    return b"\x81" + _LONG.pack(value)


def _symbol_bytes(name: str) -> bytes:
    raw = name.encode("ascii")
    return b"\xa3" + bytes([len(raw)]) + raw


def _string_bytes(text: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) < 256:
        return b"\xa1" + bytes([len(raw)]) + raw
    return b"\xb1" + _UINT.pack(len(raw)) + raw
