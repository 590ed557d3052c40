"""CIDR ACL hosts (KIP-1276), opt-in: docs/authz.md, "CIDR hosts (KIP-1276, opt-in)".

The parser cases are Kafka trunk's (AclControlManagerTest.testValidateHostPattern*,
testValidateCidrNotation*), whose CidrUtils hands a host to commons-net 3.13's SubnetUtils
(IPv4) or SubnetUtils6 (a host with `:`); the matching cases are those classes' isInRange.
"""

from __future__ import annotations

import pytest

from aclgate.authz import cidr
from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import AclBindingFilter, InvalidAclError
from tests.authz.helpers import ALLOW, DENY, LIT, PRE, G, Op, T, acl

# testValidateHostPatternValid: CIDR notations valid with CIDR support
VALID = [
    "192.168.0.0/24",
    "10.0.0.0/8",
    "172.16.0.0/16",
    "192.168.1.1/32",
    "0.0.0.0/0",
    "2001:db8::/32",
    "2001:db8:abcd::/48",
    "::1/128",
    "::/0",
    "fe80::/10",
    # commons-net: host bits may be set (the network is masked), leading zeros are decimal,
    # InetAddress.getByName strips brackets and Integer.parseInt takes a sign
    "10.0.0.1/8",
    "010.0.0.1/08",
    "[2001:db8::]/+32",
    "fe80::%1/10",
]
# testValidateHostPatternInvalid / testValidateCidrNotation*, and commons-net's refusals
INVALID = [
    ("192.168.0.0/33", "Value [33] not in range [0,32]"),
    ("192.168.0.0/-1", "Could not parse [192.168.0.0/-1]"),
    ("192.168.0.256/24", "Value [256] not in range [0,255]"),
    ("192.168.0.0/abc", "Could not parse [192.168.0.0/abc]"),
    ("192.168.0.0/", "Could not parse [192.168.0.0/]"),
    ("10.0.0.0/100", "Could not parse [10.0.0.0/100]"),
    ("10.0.0/8", "Could not parse [10.0.0/8]"),
    ("10.0.0.0/8/8", "Could not parse [10.0.0.0/8/8]"),
    ("not.an.ip/24", "Could not parse [not.an.ip/24]"),
    ("example.com/test", "Could not parse [example.com/test]"),
    ("10.0.0.0/８", "Could not parse [10.0.0.0/８]"),  # Java's \d is ASCII
    (
        "2001:db8::/129",
        "Could not parse [2001:db8::/129] - prefix length must be between 0 and 128",
    ),
    ("2001:db8::/-1", "Could not parse [2001:db8::/-1] - prefix length must be between 0 and 128"),
    ("2001:db8::/x", "Could not parse [2001:db8::/x] - invalid prefix length"),
    ("2001:db8::/32/5", "Could not parse [2001:db8::/32/5] - invalid prefix length"),
    ("not:valid:ipv6::/32", "Could not parse [not:valid:ipv6::]"),
    ("::ffff:10.0.0.0/104", "Could not parse [::ffff:10.0.0.0] - not an IPv6 address"),
    ("fe80::%eth0/10", "Could not parse [fe80::%eth0]"),
]


@pytest.mark.parametrize("host", VALID)
def test_kafkas_valid_cidr_hosts(host):
    assert cidr.invalid_cidr_message(host) is None
    assert cidr.network_of(host) is not None
    acl(T, "t", LIT, "User:a", host, Op.READ, ALLOW).validate(cidr_hosts=True)


@pytest.mark.parametrize(("host", "reason"), INVALID)
def test_kafkas_invalid_cidr_hosts(host, reason):
    binding = acl(T, "t", LIT, "User:a", host, Op.READ, ALLOW)
    with pytest.raises(InvalidAclError) as caught:
        binding.validate(cidr_hosts=True)
    assert caught.value.field == "host"
    assert caught.value.message == f"Invalid CIDR notation '{host}': {reason}"
    assert cidr.network_of(host) is None
    binding.validate()  # without the option: a literal string, as in Kafka 4.3.1


def test_a_prefix_is_read_as_integer_parse_int_reads_it():
    """A sign, leading zeros, any script's digits, within 32 bits; a text of thousands of
    digits is refused, not handed to int() (which raises past 4,300 digits)."""
    assert cidr.network_of("2001:db8::/000000000000000032") == cidr.network_of("2001:db8::/32")
    assert cidr.network_of("2001:db8::/٣٢") == cidr.network_of("2001:db8::/32")
    assert cidr.network_of("2001:db8::/-0") == cidr.network_of("::/0")
    reasons = {
        "2001:db8::/" + "1" * 5000: "invalid prefix length",
        "2001:db8::/2147483648": "invalid prefix length",
        "2001:db8::/-2147483648": "prefix length must be between 0 and 128",
        "2001:db8::/+": "invalid prefix length",
    }
    for host, reason in reasons.items():
        message = cidr.invalid_cidr_message(host)
        assert message is not None and message.endswith(reason), host


def test_hosts_without_a_slash_are_never_checked():
    """KIP-1276 changes only hosts with `/`: `*`, addresses, even garbage stay as they are."""
    for host in ("*", "10.1.2.3", "2001:db8::1", "::1", "not an address", ""):
        acl(T, "t", LIT, "User:a", host, Op.READ, ALLOW).validate(cidr_hosts=True)


def test_the_cidr_check_comes_after_kafkas_other_checks():
    with pytest.raises(InvalidAclError, match="Invalid operation ANY"):
        acl(T, "t", LIT, "User:a", "10.0.0.0/33", Op.ANY, ALLOW).validate(cidr_hosts=True)


def test_host_bits_are_masked():
    assert cidr.network_of("10.1.2.3/8") == cidr.network_of("10.0.0.0/8") == (4, 8, 10 << 24)
    assert cidr.network_of("2001:db8::1/32") == cidr.network_of("2001:db8::/32")


# ------------------------------------------------------------------------------ matching

IN_10_8 = "10.200.3.4"


def cidr_authz(*acls, on=True) -> Authorizer:
    authz = Authorizer(cidr_hosts=on)
    authz.load(acls)
    return authz


def allowed(authz: Authorizer, host: str, principal="User:a", op=Op.READ, name="t") -> bool:
    return authz.authorize(principal, host, op, T, name).allowed


@pytest.mark.parametrize(
    ("network", "inside", "outside"),
    [
        ("10.0.0.0/8", ["10.0.0.0", IN_10_8, "10.255.255.255"], ["11.0.0.1", "9.255.255.255"]),
        ("10.1.2.3/8", [IN_10_8], ["11.0.0.1"]),  # host bits set: 10.0.0.0/8
        ("192.168.1.128/25", ["192.168.1.128", "192.168.1.255"], ["192.168.1.127"]),
        ("10.1.2.3/32", ["10.1.2.3"], ["10.1.2.4"]),
        ("0.0.0.0/0", ["1.2.3.4", "255.255.255.255"], ["0.0.0.0", "0:0:0:0:0:0:0:1"]),
        (
            "2001:db8::/32",
            ["2001:db8:0:0:0:0:0:1", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"],
            ["2001:db9:0:0:0:0:0:1", "10.0.0.1"],
        ),
        ("::/0", ["0:0:0:0:0:0:0:1", "fe80:0:0:0:0:0:0:1%eth0"], ["10.0.0.1", "127.0.0.1"]),
        ("::1/128", ["0:0:0:0:0:0:0:1"], ["0:0:0:0:0:0:0:2"]),
        ("fe80::/10", ["fe80:0:0:0:1:2:3:4%2"], ["fec0:0:0:0:0:0:0:1"]),
    ],
)
def test_a_cidr_allow_matches_the_clients_in_its_network(network, inside, outside):
    authz = cidr_authz(acl(T, "t", LIT, "User:a", network, Op.READ, ALLOW))
    for host in inside:
        assert allowed(authz, host), host
    for host in outside:
        assert not allowed(authz, host), host
    literal = cidr_authz(acl(T, "t", LIT, "User:a", network, Op.READ, ALLOW), on=False)
    for host in inside:
        assert not allowed(literal, host), host  # off: Kafka 4.3.1 compares strings
    assert allowed(literal, network) and allowed(authz, network)  # the string itself, both ways


def test_client_hosts_are_read_as_commons_net_reads_them():
    authz = cidr_authz(acl(T, "t", LIT, "User:a", "10.0.0.0/8", Op.READ, ALLOW))
    assert allowed(authz, "010.001.002.003")  # SubnetUtils' dotted quad: leading zeros decimal
    for host in ("10.1.2", "10.1.2.256", "h1", "", "*", "::ffff:10.1.2.3", "10.0.0.0/8 "):
        assert not allowed(authz, host), host


def test_a_malformed_cidr_host_loaded_anyway_is_a_literal():
    """The authorizer accepts what it is given (StandardAuthorizer.addAcl); a host with `/`
    that is no network matches only its own string, like any host in Kafka 4.3.1."""
    authz = cidr_authz(acl(T, "t", LIT, "User:a", "10.0.0.0/33", Op.READ, ALLOW))
    assert not allowed(authz, "10.1.2.3")
    assert allowed(authz, "10.0.0.0/33")
    assert authz._snap.types[T].cidr_table is None


def test_deny_wins_whatever_the_host_form():
    authz = cidr_authz(
        acl(T, "t", LIT, "User:a", "10.1.2.3", Op.READ, ALLOW),
        acl(T, "t", PRE, "User:*", "10.1.0.0/16", Op.READ, DENY),
    )
    assert not allowed(authz, "10.1.2.3")
    assert not allowed(authz, "10.1.9.9", principal="User:b")
    assert allowed(cidr_authz(*authz.acls(), on=False), "10.1.2.3")


def test_a_narrower_cidr_deny_carves_out_of_a_wider_allow():
    """The KIP's example: ALLOW 192.168.1.0/24, DENY 192.168.1.128/25."""
    authz = cidr_authz(
        acl(T, "t", LIT, "User:a", "192.168.1.0/24", Op.ALL, ALLOW),
        acl(T, "t", LIT, "User:a", "192.168.1.128/25", Op.WRITE, DENY),
    )
    assert allowed(authz, "192.168.1.200", op=Op.READ)
    assert not allowed(authz, "192.168.1.200", op=Op.WRITE)
    assert allowed(authz, "192.168.1.100", op=Op.WRITE)


def test_the_named_acl_follows_kafkas_scan_order():
    """StandardAcl order within a pattern: operation, principal, host (a string: "10.0.0.0/8"
    sorts before "10.1.2.3"). The first matching DENY is named, the last matching ALLOW."""
    deny_cidr = acl(T, "t", LIT, "User:a", "10.0.0.0/8", Op.READ, DENY)
    deny_exact = acl(T, "t", LIT, "User:a", "10.1.2.3", Op.READ, DENY)
    deny_star = acl(T, "t", LIT, "User:a", "*", Op.READ, DENY)
    got = cidr_authz(deny_exact, deny_cidr, deny_star).authorize(
        "User:a", "10.1.2.3", Op.READ, T, "t"
    )
    assert got.acl == deny_star  # "*" < "10.0.0.0/8" < "10.1.2.3"
    got = cidr_authz(deny_exact, deny_cidr).authorize("User:a", "10.1.2.3", Op.READ, T, "t")
    assert got.acl == deny_cidr
    allows = [
        acl(T, "t", LIT, "User:a", h, Op.READ, ALLOW)
        for h in ("10.0.0.0/8", "10.1.2.3", "10.1.0.0/16")
    ]
    got = cidr_authz(*allows).authorize("User:a", "10.1.2.3", Op.READ, T, "t")
    assert got.acl == allows[1]
    got = cidr_authz(*allows).authorize("User:a", "10.1.9.9", Op.READ, T, "t")
    assert got.acl == allows[2]  # "10.1.0.0/16" > "10.0.0.0/8"
    # a DENY in a longer prefix group is met before any group after it
    pre = acl(T, "t", PRE, "User:*", "10.0.0.0/8", Op.READ, DENY)
    lit = acl(T, "*", LIT, "User:a", "10.1.2.3", Op.READ, DENY)
    assert cidr_authz(pre, lit).authorize("User:a", "10.1.2.3", Op.READ, T, "t").acl == pre


def test_group_principals_and_user_wildcard_reach_cidr_rows():
    authz = cidr_authz(
        acl(T, "t", LIT, "Group:ops", "10.0.0.0/8", Op.READ, ALLOW),
        acl(T, "u", LIT, "User:*", "2001:db8::/32", Op.READ, ALLOW),
    )
    assert authz.authorize("User:x", IN_10_8, Op.READ, T, "t", frozenset({"Group:ops"})).allowed
    assert not authz.authorize("User:x", IN_10_8, Op.READ, T, "t").allowed
    assert allowed(authz, "2001:db8:0:0:0:0:0:9", principal="User:y", name="u")


def test_authorize_by_resource_type_applies_cidr_hosts():
    allow = acl(T, "orders", PRE, "User:a", "10.0.0.0/8", Op.WRITE, ALLOW)
    authz = cidr_authz(allow)
    assert authz.authorize_by_resource_type("User:a", IN_10_8, Op.WRITE, T).allowed
    assert not authz.authorize_by_resource_type("User:a", "11.0.0.1", Op.WRITE, T).allowed
    assert (
        not cidr_authz(allow, on=False)
        .authorize_by_resource_type("User:a", IN_10_8, Op.WRITE, T)
        .allowed
    )
    dominated = cidr_authz(allow, acl(T, "ord", PRE, "User:*", "10.200.0.0/16", Op.WRITE, DENY))
    assert not dominated.authorize_by_resource_type("User:a", IN_10_8, Op.WRITE, T).allowed
    assert dominated.authorize_by_resource_type("User:a", "10.1.0.1", Op.WRITE, T).allowed


def test_updates_keep_the_cidr_table_in_step():
    wide = acl(T, "t", LIT, "User:a", "10.0.0.0/8", Op.READ, ALLOW)
    same_network = acl(G, "g", LIT, "User:a", "10.9.9.9/8", Op.READ, ALLOW)
    authz = cidr_authz()
    authz.update(add=[wide, same_network, acl(T, "x", PRE, "User:a", "10.0.0.0/8", Op.READ, DENY)])
    assert not allowed(authz, IN_10_8, name="x1")
    authz.update(remove=[acl(T, "x", PRE, "User:a", "10.0.0.0/8", Op.READ, DENY)])
    assert allowed(authz, IN_10_8) and authz._snap.types[T].cidr_counts == {"10.0.0.0/8": 1}
    authz.update(remove=[wide])
    assert not allowed(authz, IN_10_8)
    assert authz._snap.types[G].cidr_table is not None
    assert authz.authorize("User:a", IN_10_8, Op.READ, G, "g").allowed


def test_without_cidr_hosts_nothing_is_built():
    """The common path: no option, or no CIDR host in a type, costs no table and no lookup."""
    acls = [
        acl(T, "t", LIT, "User:a", "10.0.0.0/8", Op.READ, ALLOW),
        acl(G, "g", LIT, "User:a", "10.1.2.3", Op.READ, ALLOW),
    ]
    off = cidr_authz(*acls, on=False)
    assert all(i.cidr_table is None and not i.cidr_counts for i in off._snap.types.values())
    on = cidr_authz(*acls)
    assert on._snap.types[G].cidr_table is None and on._snap.types[T].cidr_table is not None


def test_filters_compare_hosts_as_strings():
    """AccessControlEntryFilter.matches: a filter's host equals the binding's, KIP-1276 or
    not: DescribeAcls/DeleteAcls with host 10.1.2.3 do not find an ACL on 10.0.0.0/8."""
    cidr_acl = acl(T, "t", LIT, "User:a", "10.0.0.0/8", Op.READ, ALLOW)
    authz = cidr_authz(cidr_acl)
    assert authz.acls(AclBindingFilter(host="10.1.2.3")) == []
    assert authz.acls(AclBindingFilter(host="10.0.0.0/8")) == [cidr_acl]
    assert authz.acls(AclBindingFilter(host="10.0.0.1/8")) == []  # the string, not the network
    results = authz.delete_acls([AclBindingFilter(host="10.1.2.3")])
    assert results == [[]] and authz.acl_count() == 1


def test_create_acls_validates_cidr_hosts_only_with_the_option():
    bad = acl(T, "t", LIT, "User:a", "10.0.0.0/33", Op.READ, ALLOW)
    good = acl(T, "t", LIT, "User:a", "10.0.0.0/8", Op.READ, ALLOW)
    on = cidr_authz()
    results = on.create_acls([bad, good])
    assert isinstance(results[0], InvalidAclError) and results[1] is None
    assert "Invalid CIDR notation '10.0.0.0/33'" in results[0].message
    assert on.acls() == [good]
    off = cidr_authz(on=False)
    assert off.create_acls([bad, good]) == [None, None] and off.acl_count() == 2


def test_decisions_are_cached_per_client_host():
    authz = cidr_authz(acl(T, "t", LIT, "User:a", "10.0.0.0/8", Op.READ, ALLOW))
    for _ in range(2):
        assert allowed(authz, IN_10_8) and not allowed(authz, "11.1.1.1")
