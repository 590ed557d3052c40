import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aclgate.protocol.framing import FrameSplitter, FrameTooLarge
from aclgate.protocol.header import MalformedRequest, UnknownApi, parse_request_header, peek_ids


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=30),
    cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=60),
)
def test_splitter_reassembles_any_chunking(payloads, cuts):
    stream = b"".join(framed(p) for p in payloads)
    splitter = FrameSplitter(1000)
    out, pos = [], 0
    for cut in [*cuts, len(stream)]:
        out += [bytes(f) for f in splitter.feed(stream[pos : pos + cut])]
        pos += cut
        if pos >= len(stream):
            break
    assert [f[4:] for f in out] == payloads
    assert splitter.buffered == 0


def test_frames_arriving_whole_are_zero_copy_views():
    data = framed(b"abc") + framed(b"defg")
    frames = FrameSplitter().feed(data)
    assert all(isinstance(f, memoryview) and f.readonly and f.obj is data for f in frames)


@pytest.mark.parametrize("size", [-1, 101])
def test_out_of_range_sizes_are_rejected(size):
    with pytest.raises(FrameTooLarge, match=r"outside 0\.\.100"):
        FrameSplitter(100).feed(struct.pack(">i", size))


def header_v2(api_key, version, corr, client_id, tags: bytes = b"\x00") -> bytes:
    cid = client_id.encode()
    return struct.pack(">hhih", api_key, version, corr, len(cid)) + cid + tags


def test_header_v2_with_unknown_tagged_fields_is_skipped():
    # two tags: tag 5 with 3 bytes, tag 9 with 0 bytes
    tags = b"\x02" + b"\x05\x03abc" + b"\x09\x00"
    frame = framed(header_v2(3, 12, 42, "cli", tags) + b"BODY")
    h = parse_request_header(frame)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id, h.flexible) == (
        3,
        12,
        42,
        "cli",
        True,
    )
    assert bytes(frame[h.body_offset :]) == b"BODY"


def test_header_v1_null_client_id():
    frame = framed(struct.pack(">hhih", 3, 1, 7, -1) + b"X")
    h = parse_request_header(frame)
    assert h.client_id is None and not h.flexible and bytes(frame[h.body_offset :]) == b"X"


def test_unknown_key_and_version():
    with pytest.raises(UnknownApi) as e:
        parse_request_header(framed(header_v2(10000, 0, 5, "x")))
    assert e.value.correlation_id == 5
    with pytest.raises(UnknownApi):
        parse_request_header(framed(header_v2(3, 99, 5, "x")))


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">hhih", 3, 1, 7, 50) + b"short",  # client id runs past the frame
        struct.pack(">hhih", 3, 1, 7, -5),  # negative client id length
        struct.pack(">hhih", 3, 12, 7, 0) + b"\x05\x01",  # tags past the end
        b"\x00\x03",  # shorter than a header
    ],
)
def test_malformed_headers(payload):
    with pytest.raises(MalformedRequest):
        parse_request_header(framed(payload))


def test_peek_ids():
    assert peek_ids(framed(header_v2(0, 9, 77, "p"))) == (0, 9, 77)
