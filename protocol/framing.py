"""Length-prefixed Kafka framing (sans-IO).

Every request and response is an int32 big-endian size followed by that many bytes. Frames
are handed out *with* their 4-byte size prefix so an unchanged request is forwarded as one
slice; readers start at offset 4. Frames that arrived whole inside one read are zero-copy
read-only memoryviews of that read; only frames split across reads are assembled.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final

from aclgate.protocol.header import MalformedRequest
from aclgate.protocol.versions import api_name

_SIZE: Final = struct.Struct(">i")
_SIZE_KEY: Final = struct.Struct(">ih")
DEFAULT_MAX_FRAME: Final = 104_857_600  # Kafka's socket.request.max.bytes default
DEFAULT_MAX_PRE_AUTH_FRAME: Final = 524_288  # Kafka's sasl.server.max.receive.size default


class FrameTooLarge(MalformedRequest):
    def __init__(self, size: int, limit: int, api_key: int | None = None):
        if api_key is None:
            message = f"frame size {size} is outside 0..{limit} bytes"
        else:
            message = (
                f"frame size {size} of api_key={api_key} ({api_name(api_key)}) is over that "
                f"API's limit of {limit} bytes (--max-request-bytes)"
            )
        super().__init__(message)
        self.size = size
        self.limit = limit
        self.api_key = api_key


Frame = bytes | memoryview


class FrameSplitter:
    """Cuts a byte stream into frames; `max_size` may be changed between feeds (`limit`).

    `api_limits` caps the frames of single APIs below `max_size` (api_key -> bytes): a frame
    is refused as soon as its size and API key (the first 6 bytes) are in, before the rest
    is read or buffered. A frame no larger than every limit (`unchecked`, the common case)
    costs one comparison; only a larger one waits for its API key."""

    __slots__ = ("_buf", "api_limits", "max_size", "unchecked")

    def __init__(
        self, max_size: int = DEFAULT_MAX_FRAME, api_limits: Mapping[int, int] | None = None
    ):
        self._buf = bytearray()
        self.api_limits = dict(api_limits or {})
        self.max_size = max_size
        #: frames up to this size need no look at their API key
        self.unchecked = max_size
        self.limit(max_size)

    def limit(self, max_size: int) -> None:
        """Change the global limit (e.g. a small cap before SASL authentication)."""
        self.max_size = max_size
        self.unchecked = min(max_size, *self.api_limits.values(), max_size)

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
            size: int
            (size,) = _SIZE.unpack_from(src, off)
            if size > self.unchecked or size < 0:
                if size < 0 or size > self.max_size:
                    raise FrameTooLarge(size, self.max_size)
                if available - off < 6:
                    break  # its API key is not in yet
                api_key: int
                api_key = _SIZE_KEY.unpack_from(src, off)[1]
                cap = self.api_limits.get(api_key, size)
                if size > cap:
                    raise FrameTooLarge(size, cap, api_key)
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
