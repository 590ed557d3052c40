"""Sealed DescribeTopicPartitions cursors: a next cursor that would name a topic the client may
not see is handed out as an opaque token, and opened again when the client sends it back
(docs/design.md, "Deliberate differences from Apache Kafka"; docs/apis.md, row 75).

The token is AES-SIV (RFC 5297, `cryptography`'s AESSIV) over (partition, topic name):
authenticated, so a client can neither read the name nor forge or alter a token, and
deterministic, so the same cursor always gives the same token and no nonce has to be managed.
The key is injected: the IO layer makes one at random per process (proxy/listen/server.py) and
passes it in through `Policy.cursors`; protocol/ itself draws no randomness. A token therefore
outlives neither a restart nor a hop to another proxy process: it is then not opened, the
broker pages on from an unknown name that sorts after every topic name, and the client sees
no more topics, never a hidden one.
"""

from __future__ import annotations

import base64
import binascii
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

#: '~' and ':' never occur in a topic name: a token can never be mistaken for a real cursor
PREFIX = "~aclgate:"
#: AES-SIV with two AES-256 keys
KEY_SIZE = 64
#: binds a token to this use: a value sealed for anything else with the same key never opens
_CONTEXT = [b"aclgate DescribeTopicPartitions cursor v1"]
_PARTITION = struct.Struct(">i")


class CursorSeal:
    """Seals (topic, partition) cursors into tokens and opens them, under one key."""

    __slots__ = ("_aead",)

    PREFIX = PREFIX

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_SIZE:  # AESSIV also takes 32 or 48 bytes: one size, AES-256
            raise ValueError(f"a cursor key is {KEY_SIZE} bytes, not {len(key)}")
        self._aead = AESSIV(key)

    def seal(self, topic: str, partition: int) -> str:
        """The token that stands for cursor (topic, partition)."""
        sealed = self._aead.encrypt(_PARTITION.pack(partition) + topic.encode(), _CONTEXT)
        return PREFIX + base64.urlsafe_b64encode(sealed).rstrip(b"=").decode("ascii")

    def open(self, token: str) -> tuple[str, int] | None:
        """(topic, partition) of a token sealed with this key, or None for anything else: a
        real topic name, a token altered in any character, one sealed under another key."""
        if not token.startswith(PREFIX):
            return None
        text = token[len(PREFIX) :]
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            return None
        # one spelling per token: no alternative encodings of the same bytes
        if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != text:
            return None
        try:
            plain = self._aead.decrypt(raw, _CONTEXT)
        except (InvalidTag, ValueError):
            return None
        if len(plain) < _PARTITION.size:
            return None
        try:
            topic = plain[_PARTITION.size :].decode()
        except UnicodeDecodeError:
            return None
        return topic, _PARTITION.unpack_from(plain)[0]


__all__ = ["KEY_SIZE", "PREFIX", "CursorSeal"]
