"""ACL filters answered through the index (Snapshot.matching) — issue 20, B7.

The property: for any ACL set and any filter, the indexed matcher returns exactly what the
linear scan over the listing returned before (the same bindings, in the same order), for
DescribeAcls (`acls`) and DeleteAcls (`match_filters`, `delete_acls`). The regression: the work
of 1,000 LITERAL filters over 50,000 ACLs is counted in filter-binding comparisons, and must be
proportional to the filters and their matches, not filters x ACLs (the old scan: 50 million).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aclgate.authz.model import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
    listing_order,
    match_filters,
    scan,
)
from tests.authz.helpers import ALLOW, DENY, LIT, PRE, C, G, T, loaded

# names over a tiny alphabet with both cases, so that names are often prefixes of each other,
# equal to `*`, start with `*`, or differ only in case (matching is case-sensitive)
names = st.text(alphabet="aAb*", max_size=4)
principals = st.sampled_from(["User:a", "User:A", "User:*", "Group:a"])
hosts = st.sampled_from(["h1", "H1", "*"])
operations = st.sampled_from([o for o in AclOperation if o > AclOperation.ANY])
bindings = st.builds(
    AclBinding,
    st.sampled_from([T, G, C, ResourceType.USER]),
    names,
    st.sampled_from([LIT, PRE]),
    principals,
    hosts,
    operations,
    st.sampled_from([ALLOW, DENY]),
)
filters = st.builds(
    AclBindingFilter,
    st.sampled_from([ResourceType.ANY, T, G, C, ResourceType.UNKNOWN]),
    st.none() | names,
    st.sampled_from(list(PatternType)),
    st.none() | principals,
    st.none() | hosts,
    st.sampled_from(list(AclOperation)),
    st.sampled_from(list(AclPermissionType)),
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(bindings, max_size=40), st.lists(filters, max_size=6))
def test_indexed_matching_is_the_linear_scan(acls: list[AclBinding], fs: list[AclBindingFilter]):
    authz = loaded(acls)
    listing = listing_order(set(acls))  # what Snapshot.bindings() held, what the scan read
    for f in fs:
        assert authz.acls(f) == scan(listing)(f), f
    results, doomed = match_filters(scan(listing), fs)
    got, got_doomed = authz.match_filters(fs)
    assert (_comparable(got), got_doomed) == (_comparable(results), doomed)
    assert _comparable(authz.delete_acls(fs)) == _comparable(results)


def _comparable(results: list[list[AclBinding] | InvalidAclError]) -> list[object]:
    """Exceptions compare by identity: an invalid filter's result as its field and message."""
    return [(r.field, r.message) if isinstance(r, InvalidAclError) else r for r in results]


@pytest.fixture
def comparisons(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts AclBindingFilter.matches calls: the matching work, whatever the clock says."""
    counted = [0]
    original = AclBindingFilter.matches

    def matches(self: AclBindingFilter, binding: AclBinding) -> bool:
        counted[0] += 1
        if counted[0] > 1_000_000:  # the old scan would make 50 million: stop it early
            raise AssertionError("filter matching scans the ACL set")
        return original(self, binding)

    monkeypatch.setattr(AclBindingFilter, "matches", matches)
    yield counted


def test_literal_filters_cost_their_matches_not_the_acl_set(comparisons: list[int]) -> None:
    acls = [
        AclBinding(T, f"topic-{i}", LIT, f"User:u{i % 100}", "*", AclOperation.READ, ALLOW)
        for i in range(50_000)
    ]
    acls += [AclBinding(T, "topic-", PRE, "User:p", "*", AclOperation.WRITE, DENY)]
    authz = loaded(acls)
    absent = [AclBindingFilter(T, f"absent-{i}", LIT) for i in range(1_000)]
    present = [AclBindingFilter(T, f"topic-{i}", LIT) for i in range(0, 50_000, 50)]
    matching = [AclBindingFilter(T, f"topic-{i}", PatternType.MATCH) for i in range(1_000)]

    results = authz.delete_acls(absent + present)
    assert results == [[]] * 1_000 + [[acls[i]] for i in range(0, 50_000, 50)]
    assert comparisons[0] == 1_000  # one candidate per present filter, none per absent one
    comparisons[0] = 0
    assert [authz.acls(f) for f in matching[1:3]] == [[acls[1], acls[-1]], [acls[2], acls[-1]]]
    assert authz.match_filters(matching)[0][1] == [acls[1], acls[-1]]
    assert comparisons[0] <= 2 * 1_002  # the literal name and the one prefix, per filter
    assert authz.acl_count() == 50_001 - 1_000
