"""Issue 20, B6: no single client's request may hold the event loop every client shares.

* Per-API request size limits (protocol/framing.py, table.py `MAX_REQUEST_BYTES`): an
  over-limit request is refused from its first 6 bytes (size and API key), before the rest
  is read or buffered.
* Checks that do not depend on a request's entries are decided on the header
  (table.py `Row.header_check`): a denied CreateAcls/DeleteAcls is answered without its
  entries being decoded (counted here by spying on the decoder).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.protocol import codec
from aclgate.protocol.enforce import base
from aclgate.protocol.enforce.acls import DENIED_MESSAGE, ZERO_THROTTLE
from aclgate.protocol.enforce.context import AuthContext, Policy
from aclgate.protocol.enforce.table import (
    MAX_REQUEST_BYTES,
    advertised_versions,
    handlers,
    request_limits,
)
from aclgate.protocol.framing import FrameSplitter, FrameTooLarge
from aclgate.protocol.session import ProxySession, SessionConfig
from aclgate.protocol.versions import response_class, response_module
from aclgate.proxy.config import ConfigError, parse_request_limit
from tests.fixtures.rawclient import module, request_entity
from tests.protocol.test_session import FakeIO

MiB = 1 << 20
ALLOWED = advertised_versions()
ALTER_CLUSTER = AclBinding(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL,
                           "User:ANONYMOUS", "*", AclOperation.ALTER, AclPermissionType.ALLOW)  # fmt: skip


def _session(
    acls: list[AclBinding], limits: dict[int, int] | None = None, auto_turns: bool = True
) -> tuple[ProxySession, FakeIO]:
    """A session of User:ANONYMOUS under `acls` (nothing else allowed); with `auto_turns`,
    a request decided a slice per turn is decided whole at once (io.run_turns otherwise)."""
    authorizer = Authorizer(allow_everyone_if_no_acl_found=False)
    authorizer.load(acls)
    config = SessionConfig(
        handlers=handlers(), allowed_versions=ALLOWED, max_request_bytes=limits or {}
    )
    ctx = AuthContext(Policy(authorizer=authorizer), "User:ANONYMOUS", "127.0.0.1", "PLAINTEXT")
    io = FakeIO()
    io.auto_turns = auto_turns
    session = io.session = ProxySession(config, io, context=ctx)
    return session, io


def create_acls(count: int, version: int = 3, corr: int = 7) -> bytes:
    m = module(30, version)
    creation = m.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3,
                             principal="User:a", host="*", operation=3, permission_type=3)  # fmt: skip
    return codec.encode_request(corr, request_entity(30, version, creations=(creation,) * count))


def delete_acls(count: int, version: int = 3, corr: int = 7) -> bytes:
    m = module(31, version)
    acl_filter = m.DeleteAclsFilter(
        resource_type_filter=2, resource_name_filter="t", pattern_type_filter=3,
        principal_filter="User:a", host_filter="*", operation=3, permission_type=3,
    )  # fmt: skip
    return codec.encode_request(corr, request_entity(31, version, filters=(acl_filter,) * count))


REQUESTS = {30: create_acls, 31: delete_acls}


def kio_denied_answer(api_key: int, version: int, count: int, corr: int = 7) -> bytes:
    """Kafka's denied answer built entry by entry with kio (as the handlers built it before)."""
    mod = response_module(api_key, version)
    entry: Any
    if api_key == 30:
        entry = mod.AclCreationResult(
            error_code=ErrorCode.cluster_authorization_failed, error_message=DENIED_MESSAGE
        )
        fields = {"results": (entry,) * count}
    else:
        entry = mod.DeleteAclsFilterResult(
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=DENIED_MESSAGE,
            matching_acls=(),
        )
        fields = {"filter_results": (entry,) * count}
    cls = response_class(api_key, version)
    return codec.encode_response(corr, cls(throttle_time=ZERO_THROTTLE, **fields))


@pytest.fixture
def decodes(monkeypatch) -> list[int]:
    """The API keys of every request body decoded from now on."""
    seen: list[int] = []
    real = base.decode_request

    def spy(frame, header):
        seen.append(header.api_key)
        return real(frame, header)

    monkeypatch.setattr(base, "decode_request", spy)
    return seen


# ------------------------------------------------------------------ decided on the header


@pytest.mark.parametrize("api_key", [30, 31])
def test_denied_acl_change_of_200000_entries_is_answered_without_decoding_them(api_key, decodes):
    session, io = _session([])
    session.client_data(REQUESTS[api_key](200_000))
    assert decodes == []  # before: the 200,000 entries were decoded, then the check made
    assert io.closed is None
    body = codec.decode_response(bytes(io.client), api_key, 3)
    results = body.results if api_key == 30 else body.filter_results
    assert len(results) == 200_000
    assert {(r.error_code, r.error_message) for r in results} == {
        (ErrorCode.cluster_authorization_failed, DENIED_MESSAGE)
    }


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("api_key", [30, 31])
@pytest.mark.parametrize("count", [0, 1, 3, 200])
def test_denied_answer_is_the_one_kio_builds_entry_by_entry(api_key, version, count):
    session, io = _session([])
    session.client_data(REQUESTS[api_key](count, version))
    assert bytes(io.client) == kio_denied_answer(api_key, version, count)


@pytest.mark.pure_python  # `decodes` counts calls through base.decode_request
@pytest.mark.parametrize("api_key", [30, 31])
def test_allowed_acl_change_is_still_decoded_and_checked_once(api_key, decodes):
    session, io = _session([ALTER_CLUSTER])
    session.client_data(REQUESTS[api_key](2))
    assert decodes == [api_key]
    body = codec.decode_response(bytes(io.client), api_key, 3)
    results = body.results if api_key == 30 else body.filter_results
    # no ACL store in this policy: Kafka's answer without an authorizer, past the check
    assert [r.error_code for r in results] == [ErrorCode.security_disabled] * 2


@pytest.mark.parametrize("api_key", [30, 31])
def test_a_count_the_frame_cannot_hold_is_malformed(api_key):
    frame = bytearray(REQUESTS[api_key](0, version=1))  # v1: the body is the int32 count
    struct.pack_into(">i", frame, len(frame) - 4, 1_000_000)  # claims 10^6 entries, has none
    session, io = _session([])
    session.client_data(bytes(frame))
    assert io.closed is not None and io.closed[1] == "malformed_request"
    assert io.client == b""


# ------------------------------------------------------------------ per-API size limits


def _prefix(api_key: int, size: int) -> bytes:
    """The first bytes of a request frame of `size` bytes: size, API key, version."""
    return struct.pack(">ihhi", size, api_key, 3, 1)


def test_splitter_refuses_an_over_limit_api_from_its_first_six_bytes():
    splitter = FrameSplitter(100 * MiB, {31: MiB})
    assert splitter.feed(_prefix(31, 50 * MiB)[:5]) == []  # its API key is not in yet
    with pytest.raises(FrameTooLarge, match=r"api_key=31 \(DeleteAcls\).*limit of 1048576"):
        splitter.feed(_prefix(31, 50 * MiB)[5:])


def test_splitter_keeps_apis_without_a_limit_at_the_global_one():
    splitter = FrameSplitter(100 * MiB, {31: MiB})
    assert splitter.feed(_prefix(0, 50 * MiB)) == []  # Produce: buffered, waits for the rest
    assert splitter.buffered == 12
    assert splitter.unchecked == MiB  # frames up to 1 MiB are never looked at twice


def test_splitter_lowered_global_limit_still_wins():
    splitter = FrameSplitter(100 * MiB, {31: MiB})
    splitter.limit(512 * 1024)  # before SASL authentication
    with pytest.raises(FrameTooLarge, match=r"outside 0\.\.524288"):
        splitter.feed(_prefix(31, 600 * 1024))


def test_session_closes_on_the_first_64k_of_a_50mb_delete_acls():
    session, io = _session([], limits=request_limits())
    data = _prefix(31, 50 * MiB) + bytes(64 * 1024 - 10)
    session.client_data(data)
    assert io.closed is not None
    reason, kind = io.closed
    assert kind == "frame_too_large"
    assert "DeleteAcls" in reason and str(50 * MiB) in reason and str(MiB) in reason
    assert not session.partial_request  # nothing of it held


def test_session_fast_path_checks_the_api_limit_of_a_whole_frame():
    """A whole over-limit frame in one read (the fast path) is refused too."""
    session, io = _session([], limits={30: 1000})
    session.client_data(create_acls(200))
    assert io.closed is not None and io.closed[1] == "frame_too_large"


def test_limits_cover_the_small_apis_and_leave_produce_and_sync_group_at_the_global_limit():
    limits = request_limits()
    assert limits[30] == limits[31] == limits[29] == MiB
    assert limits[3] == limits[2] == MiB // 4  # Metadata, ListOffsets: docs/design.md,
    # "Per-API request size limits"
    assert limits[11] == 8 * MiB  # JoinGroup
    assert not {0, 14} & set(limits)  # Produce, SyncGroup: record batches, assignments
    # Fetch, ShareFetch, ShareAcknowledge name partitions: 512 KiB (issue 20's sweep)
    assert limits[1] == limits[78] == limits[79] == MiB // 2
    assert set(MAX_REQUEST_BYTES) <= set(ALLOWED)
    assert request_limits({30: 4 * MiB, 0: 10})[30] == 4 * MiB


@pytest.mark.parametrize(
    "text, parsed",
    [("CreateAcls=4MiB", (30, 4 * MiB)), ("31=1024", (31, 1024)), ("metadata=2MiB", (3, 2 * MiB))],
)
def test_max_request_bytes_flag(text, parsed):
    assert parse_request_limit(text) == parsed


@pytest.mark.parametrize("text", ["CreateAcls", "Nope=1MiB", "30=0", "9999=1"])
def test_max_request_bytes_flag_refuses_nonsense(text):
    with pytest.raises(ConfigError):
        parse_request_limit(text)
