"""Length prefixes of arrays and bytes, read and written in place: legacy (int32) or compact
(unsigned varint of length + 1), -1 meaning null. For the code that walks or splices raw
frames instead of decoding them with kio."""

from __future__ import annotations

import struct

from kio.serial.readers import read_unsigned_varint

_I32 = struct.Struct(">i")


def read_length(buf: bytes | memoryview, offset: int, flexible: bool) -> tuple[int, int]:
    """(length, bytes the prefix used); -1 for null."""
    if flexible:
        value, used = read_unsigned_varint(buf, offset)
        return value - 1, used
    return _I32.unpack_from(buf, offset)[0], 4


def length_prefix(length: int, flexible: bool) -> bytes:
    return uvarint(length + 1) if flexible else _I32.pack(length)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
