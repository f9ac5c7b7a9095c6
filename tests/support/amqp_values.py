"""AMQP values of every type an application property may hold, as python-qpid-proton
encodes them (neither syphon's encoder nor the SDK's), for the tests of the bytes path."""

from __future__ import annotations

import uuid
from typing import Any

from proton import (
    Described,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)

TIMESPAN = symbol("com.microsoft:timespan")


def every_type() -> dict[str, Any]:
    """An application property of every AMQP primitive type, and the described values
    the .NET SDK writes."""
    return {
        "null": None,
        "boolean": True,
        "ubyte": ubyte(255),
        "ushort": ushort(65535),
        "uint": uint(2**32 - 1),
        "ulong": ulong(2**64 - 1),
        "byte": byte(-128),
        "short": short(-32768),
        "int": int32(-(2**31)),
        "long": 2**40,
        "small-long": 7,
        "float": float32(1.5),
        "double": 2.25,
        "decimal32": decimal32(7),
        "decimal64": decimal64(12345),
        "decimal128": decimal128(b"\x01" * 16),
        "char": char("é"),
        "timestamp": timestamp(1_700_000_000_123),
        "uuid": uuid.UUID(int=42),
        "binary": b"\xff\x00\xfe",
        "string": "héllo",
        "symbol": symbol("sym"),
        "timespan": Described(TIMESPAN, 10**7),
        "uri": Described(symbol("com.microsoft:uri"), "https://contoso.example/x"),
        "datetime-offset": Described(
            symbol("com.microsoft:datetime-offset"), [638_000_000_000_000_000, 120]
        ),
    }
