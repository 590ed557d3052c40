"""Client-chosen strings are cut to a documented length where the proxy keeps or writes them
(issue 20, B8): the cut itself, and the client-id cache of protocol/header.py."""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Iterator

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from aclgate.protocol import bounds, header
from aclgate.protocol.bounds import bounded

LIMITS = st.sampled_from([bounds.CLIENT_ID, bounds.RESOURCE_NAME, bounds.PRINCIPAL])
MARKER = re.compile(r"\.\.\.\[(\d+) chars sha256:([0-9a-f]{16})\]$")
#: any text, lone surrogates too (a resource name kio decoded is valid UTF-8, but the cut must
#: not fail on any str)
TEXT = st.text(st.characters() | st.characters(categories=["Cs"]), max_size=3000)


@given(TEXT, LIMITS)
def test_never_longer_than_the_bound_and_short_strings_are_the_same_object(text, limit):
    out = bounded(text, limit)
    assert len(out) <= limit
    if len(text) <= limit:
        assert out is text  # not copied: the common case costs a length check
        return
    mark = MARKER.search(out)
    assert mark is not None and len(out) == limit
    assert int(mark.group(1)) == len(text)
    whole = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    assert mark.group(2) == whole[: bounds.DIGEST_CHARS]  # a SIEM can recompute it
    assert text.startswith(out[: mark.start()])  # a recognisable prefix


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40), LIMITS)
def test_distinct_long_strings_stay_distinct(tail_a, tail_b, limit):
    """Same long prefix, different ends: still two audit keys, never one."""
    assume(tail_a != tail_b)
    prefix = "client-" + "x" * limit
    assert bounded(prefix + tail_a, limit) != bounded(prefix + tail_b, limit)


def request_frame(client_id: bytes) -> bytes:
    """An ApiVersions v0 request (header v1) with this client id."""
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


@pytest.fixture
def empty_cache() -> Iterator[dict[bytes, str]]:
    header._CLIENT_IDS.clear()
    yield header._CLIENT_IDS
    header._CLIENT_IDS.clear()


def test_the_client_id_cache_holds_at_most_its_bound_in_bytes(empty_cache):
    """2,000 distinct 30 KB ids (114 MiB kept before): none is kept, each comes out cut with
    its own digest; a short id is still decoded once and shared."""
    ids = {
        header.parse_request_header(request_frame(b"%05d" % i + b"x" * 30_000)).client_id
        for i in range(2000)
    }
    assert len(ids) == 2000
    assert all(cid is not None and len(cid) == bounds.CLIENT_ID for cid in ids)
    assert all(MARKER.search(cid) for cid in ids if cid is not None)
    first = header.parse_request_header(request_frame(b"rdkafka")).client_id
    assert header.parse_request_header(request_frame(b"rdkafka")).client_id is first
    assert all(len(raw) <= bounds.CLIENT_ID for raw in empty_cache)
    kept = sum(len(raw) + len(text) for raw, text in empty_cache.items())
    assert kept <= header.CLIENT_ID_CACHE_ENTRIES * 2 * bounds.CLIENT_ID


def test_a_long_client_id_is_cut_by_characters_not_bytes(empty_cache):
    """200 four-byte characters are 800 bytes but only 200 characters: kept whole."""
    text = "\U0001f600" * 200
    assert header.parse_request_header(request_frame(text.encode())).client_id == text
    long = "é" * 300
    cut = header.parse_request_header(request_frame(long.encode())).client_id
    assert cut == bounded(long, bounds.CLIENT_ID) and len(cut) == bounds.CLIENT_ID
