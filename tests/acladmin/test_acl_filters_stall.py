"""A super user's DeleteAcls with 1,000 filters over 20,000 ACLs, through a real proxy (issue
20, B7): the answer is exact, and another client's pings are not held up meanwhile. Before the
filters were answered through the index, the proxy compared every filter with every ACL on its
event loop (20 million comparisons here, seconds of stall for every client of the worker).
tansu behind the proxy: the ACL Admin API never reaches it."""

from __future__ import annotations

import threading
import time

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import AclBinding, AclBindingFilter
from bench.acl_filters import Pinger, acl_entry, filter_fields, write_acls
from tests.fixtures.rawclient import RawClient, module, request_entity

ACLS, FILTERS, PRESENT = 20_000, 1_000, 10
DESCRIBE_ACLS, DELETE_ACLS = 29, 31
TOPIC, LITERAL, ANY = 2, 3, 1
#: generous: the old scan stalled this ping for seconds; the index answers in milliseconds
STALL_BOUND = 0.25


def test_thousand_filters_over_twenty_thousand_acls(tansu, proxy_factory, tmp_path) -> None:
    acl_file = tmp_path / "acls.json"
    write_acls(acl_file, ACLS)
    proxy = proxy_factory(
        tansu.bootstrap,
        acl_file=acl_file,
        super_user=["User:ANONYMOUS"],
        allow_everyone_if_no_acl_found=False,
    )
    assert proxy.server.authorizer.acl_count() == ACLS
    mod = module(DELETE_ACLS, 3)

    # 1,000 filters that match nothing: pure matching, no change to commit
    absent = request_entity(
        DELETE_ACLS,
        3,
        filters=tuple(
            mod.DeleteAclsFilter(**filter_fields(f"absent-{i}", TOPIC, LITERAL))
            for i in range(FILTERS)
        ),
    )
    pinger = Pinger(proxy.port)
    pinger.start()
    time.sleep(0.2)
    with RawClient(proxy.bootstrap, timeout=60) as admin:
        start = time.monotonic()
        response = admin.request(absent)
        end = time.monotonic()
        assert [(r.error_code, r.matching_acls) for r in response.filter_results] == [
            (0, ())
        ] * FILTERS
        pinger.stop.set()
        pinger.join(5)
        pinger.conn.close()
        worst = pinger.worst(start, end)
        assert worst < STALL_BOUND, f"another client waited {worst * 1000:.0f} ms"

        # every 100th filter names an ACL that exists: exactly those are reported and removed
        names = [f"topic-{i}" if i % 100 == 0 else f"absent-{i}" for i in range(FILTERS)]
        some = request_entity(
            DELETE_ACLS,
            3,
            filters=tuple(mod.DeleteAclsFilter(**filter_fields(n, TOPIC, LITERAL)) for n in names),
        )
        response = admin.request(some)
    got = [
        [(m.resource_name, m.principal, m.operation) for m in r.matching_acls]
        for r in response.filter_results
    ]
    expected = [
        [(n, f"User:u{int(n[6:]) % 100}", 3)] if n.startswith("topic-") else [] for n in names
    ]
    assert got == expected
    assert all(r.error_code == 0 for r in response.filter_results)
    assert proxy.server.authorizer.acl_count() == ACLS - PRESENT
    assert AclBinding.from_dict(acl_entry(0)) not in proxy.server.authorizer.acls()
    assert AclBinding.from_dict(acl_entry(1)) in proxy.server.authorizer.acls()


def test_wide_filters_are_served_off_the_event_loop(
    tansu, proxy_factory, tmp_path, monkeypatch
) -> None:
    """A filter without a resource name can match every ACL (210,000: seconds of CPU to match,
    build and encode): DescribeAcls and DeleteAcls with one are matched in a worker thread, and
    the answers are still exact, in KRaft's listing order."""
    count = 2_000
    acl_file = tmp_path / "acls.json"
    write_acls(acl_file, count)
    listed: list[threading.Thread] = []  # who read the whole listing for a request
    compared: set[threading.Thread] = set()  # who compared a filter with an ACL
    acls, matches = Authorizer.acls, AclBindingFilter.matches

    def listing(self: Authorizer, filter: AclBindingFilter | None = None) -> list[AclBinding]:
        if filter is not None:  # a request's filter (the store's fingerprint passes none)
            listed.append(threading.current_thread())
        return acls(self, filter)

    def comparing(self: AclBindingFilter, binding: AclBinding) -> bool:
        compared.add(threading.current_thread())
        return matches(self, binding)

    monkeypatch.setattr(Authorizer, "acls", listing)
    monkeypatch.setattr(AclBindingFilter, "matches", comparing)
    proxy = proxy_factory(
        tansu.bootstrap,
        acl_file=acl_file,
        super_user=["User:ANONYMOUS"],
        allow_everyone_if_no_acl_found=False,
    )
    everything = request_entity(DESCRIBE_ACLS, 3, **filter_fields(None, ANY, ANY))
    of_u7 = {**filter_fields(None, ANY, ANY), "principal_filter": "User:u7"}
    u7 = sorted((i for i in range(count) if i % 100 == 7), key=str, reverse=True)
    with RawClient(proxy.bootstrap, timeout=60) as admin:
        described = admin.request(everything)
        described_u7 = admin.request(request_entity(DESCRIBE_ACLS, 3, **of_u7))
        mod = module(DELETE_ACLS, 3)
        deleted = admin.request(
            request_entity(DELETE_ACLS, 3, filters=(mod.DeleteAclsFilter(**of_u7),))
        )
    assert described.error_code == 0
    assert [(r.resource_name, [a.principal for a in r.acls]) for r in described.resources] == [
        (f"topic-{i}", [f"User:u{i % 100}"]) for i in sorted(range(count), key=str, reverse=True)
    ]
    assert [r.resource_name for r in described_u7.resources] == [f"topic-{i}" for i in u7]
    [result] = deleted.filter_results
    assert result.error_code == 0
    assert [m.resource_name for m in result.matching_acls] == [f"topic-{i}" for i in u7]
    assert proxy.server.authorizer.acl_count() == count - len(u7)
    assert listed and proxy._thread not in listed, "DescribeAcls ANY read on the event loop"
    assert compared and proxy._thread not in compared, "a wide filter matched on the event loop"
