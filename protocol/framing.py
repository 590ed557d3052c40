"""Length-prefixed Kafka framing (sans-IO).

Every request and response is an int32 big-endian size followed by that many bytes. Frames
are handed out *with* their 4-byte size prefix so an unchanged request is forwarded as one
slice; readers start at offset 4. Frames that arrived whole inside one read are zero-copy
read-only memoryviews of that read; only frames split across reads are assembled.
"""

from __future__ import annotations

import struct

from aclgate.protocol.header import MalformedRequest

_SIZE = struct.Struct(">i")
DEFAULT_MAX_FRAME = 104_857_600  # Kafka's socket.request.max.bytes default
DEFAULT_MAX_PRE_AUTH_FRAME = 524_288  # Kafka's sasl.server.max.receive.size default


class FrameTooLarge(MalformedRequest):
    def __init__(self, size: int, limit: int):
        super().__init__(f"frame size {size} is outside 0..{limit} bytes")
        self.size = size
        self.limit = limit


Frame = bytes | memoryview


class FrameSplitter:
    """Cuts a byte stream into frames; `max_size` may be changed between feeds."""

    __slots__ = ("_buf", "max_size")

    def __init__(self, max_size: int = DEFAULT_MAX_FRAME):
        self._buf = bytearray()
        self.max_size = max_size

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        """All frames completed by `data`; raises FrameTooLarge on an out-of-range size."""
        buf = self._buf
        src: bytes | bytearray = data
        if buf:
            buf += data
            src = buf
        available = len(src)
        ends: list[int] = []
        off = 0
        while available - off >= 4:
            (size,) = _SIZE.unpack_from(src, off)
            if size < 0 or size > self.max_size:
                raise FrameTooLarge(size, self.max_size)
            end = off + 4 + size
            if end > available:
                break
            ends.append(end)
            off = end
        if src is data:
            view = memoryview(data)
            if off < available:
                self._buf = bytearray(view[off:])
        elif off:
            # Assembled from several reads: one copy into immutable bytes, then views of it.
            view = memoryview(bytes(buf) if off == available else bytes(buf[:off]))
            del buf[:off]
        else:
            return []
        frames: list[Frame] = []
        start = 0
        for end in ends:
            frames.append(view[start:end])
            start = end
        return frames
