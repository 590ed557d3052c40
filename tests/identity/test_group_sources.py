"""The three sources of a session's groups, unit by unit (docs/identity.md, "Groups"): an
OAUTHBEARER token's claim (--sasl-oauthbearer-groups-claim-name), the client certificate
(--ssl-group-from, --ssl-group-mapping-rules) and the users file (`aclgate users ... --group`).
End to end through `aclgate serve`: tests/listeners/test_groups.py."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from aclgate.certs import pki
from aclgate.protocol.identity.certgroups import (
    CertificateGroupMapper,
    CertificateGroupsError,
    parse_group_source,
)
from aclgate.protocol.identity.groups import MAX_GROUP_NAME, MAX_GROUPS, TooManyGroupsError
from aclgate.protocol.identity.principal import groups_for_connection
from aclgate.protocol.identity.sasl import (
    Jwks,
    JwtValidationError,
    JwtValidator,
    SaslAuthenticationError,
    create_server,
)
from aclgate.protocol.identity.sasl.client import PlainSaslClient, ScramSaslClient
from aclgate.protocol.identity.sasl.jwt import GroupsClaimError, claim_value, groups_from_claims
from aclgate.proxy.cli import main
from aclgate.proxy.config import ConfigError, ProxyConfig
from aclgate.proxy.security.listener import ReloadingUsers
from aclgate.proxy.security.usersfile import (
    UsersFileError,
    add_user,
    load_users,
    parse_users,
    set_groups,
)
from tests.identity.test_sasl_oauthbearer import JWKS_JSON, NOW, b64url, claims, message, sign

# ------------------------------------------------------------------ OAUTHBEARER: the claim


def validator(claim: str | None) -> JwtValidator:
    return JwtValidator(Jwks.from_json(JWKS_JSON), groups_claim=claim)


def login(claim: str | None, token: str):
    """An OAUTHBEARER exchange with `token`; the server, complete."""
    server = create_server(
        "OAUTHBEARER", oauth_validator=validator(claim), clock_ms=lambda: NOW * 1000
    )
    assert server.evaluate(message(token)) == b""
    assert server.complete
    return server


@pytest.mark.parametrize(
    ("claim", "extra", "groups"),
    [
        ("groups", {"groups": ["payments", "audit"]}, ("payments", "audit")),
        ("groups", {"groups": ["payments", "payments"]}, ("payments",)),  # distinct
        # a string is one group, never split: directory names hold spaces and commas
        ("groups", {"groups": "Domain Users, EMEA"}, ("Domain Users, EMEA",)),
        ("groups", {"groups": []}, ()),
        ("groups", {"groups": None}, ()),  # null: none, like an absent claim
        ("groups", {}, ()),
        ("groups", {"groups": ["", "payments"]}, ("payments",)),  # an empty name is no group
        # Keycloak's realm roles: a path into nested objects
        ("realm_access.roles", {"realm_access": {"roles": ["payments"]}}, ("payments",)),
        ("realm_access.roles", {"realm_access": {"roles": "payments"}}, ("payments",)),
        ("realm_access.roles", {"realm_access": {}}, ()),
        ("realm_access.roles", {}, ()),
        ("a.b.c", {"a": {"b": {"c": ["deep"]}}}, ("deep",)),
        # a namespaced claim (Auth0) is a top-level name with dots: taken as it is
        ("https://example.com/groups", {"https://example.com/groups": ["x"]}, ("x",)),
    ],
)
def test_groups_claim_values(claim, extra, groups) -> None:
    assert groups_from_claims(claims(**extra), claim) == groups
    server = login(claim, sign({**claims(), **extra}))
    assert server.authorization_id == "alice"
    assert server.group_names() == groups


@pytest.mark.parametrize(
    ("claim", "extra", "reason"),
    [
        ("groups", {"groups": 7}, "the groups claim 'groups' is a number"),
        ("groups", {"groups": {"name": "payments"}}, "the groups claim 'groups' is an object"),
        ("groups", {"groups": True}, "the groups claim 'groups' is a boolean"),
        ("groups", {"groups": ["payments", 7]}, "the groups claim 'groups' holds a number"),
        ("groups", {"groups": [None]}, "the groups claim 'groups' holds null"),
        ("groups", {"groups": [["nested"]]}, "the groups claim 'groups' holds an array"),
        (
            "realm_access.roles",
            {"realm_access": {"roles": {"payments": True}}},
            "the groups claim 'realm_access.roles' is an object",
        ),
        (
            "realm_access.roles",
            {"realm_access": ["payments"]},
            "the groups claim 'realm_access.roles': 'realm_access' is an array, not an object",
        ),
        (
            "groups",
            {"groups": [f"g{i}" for i in range(MAX_GROUPS + 1)]},
            f"more than {MAX_GROUPS} groups",
        ),
        ("groups", {"groups": "x" * (MAX_GROUP_NAME + 1)}, "a group name of 256 characters"),
    ],
)
def test_groups_claim_of_the_wrong_type_fails_the_login_naming_it(claim, extra, reason) -> None:
    """Fail closed: never a session without the groups the IdP meant (a DENY on one of them
    would not apply); the client is told which claim, as the token is its own."""
    token = sign({**claims(), **extra})
    with pytest.raises(GroupsClaimError, match=reason):
        validator(claim).validate(token, NOW * 1000)
    server = create_server(
        "OAUTHBEARER", oauth_validator=validator(claim), clock_ms=lambda: NOW * 1000
    )
    with pytest.raises(SaslAuthenticationError) as caught:
        server.evaluate(message(token))
    assert caught.value.error_message("OAUTHBEARER").startswith("Authentication failed: ")
    assert reason in caught.value.error_message("OAUTHBEARER")
    assert not server.complete and server.group_names() == ()


def test_groups_claim_is_read_only_from_a_token_that_passed_every_other_check() -> None:
    """A forged or expired token with a broken groups claim gets Kafka's invalid_token, not a
    word about its groups."""
    head, _, sig = sign(claims()).split(".")
    forged = f"{head}.{b64url(json.dumps(claims(groups=7)).encode())}.{sig}"
    expired = sign(claims(groups=7, exp=NOW - 100))
    for token in (forged, expired):
        with pytest.raises(JwtValidationError) as caught:
            validator("groups").validate(token, NOW * 1000)
        assert not isinstance(caught.value, GroupsClaimError)
        server = create_server(
            "OAUTHBEARER", oauth_validator=validator("groups"), clock_ms=lambda: NOW * 1000
        )
        assert server.evaluate(message(token)) == b'{"status":"invalid_token"}'


def test_without_the_setting_tokens_give_no_groups() -> None:
    server = login(None, sign(claims(groups=["payments"])))
    assert server.group_names() == ()
    server = login(None, sign(claims(groups=7)))  # not read, so not refused either
    assert server.group_names() == ()


def test_fifty_thousand_groups_are_refused_without_reading_them_all() -> None:
    names = [f"group-{i}" for i in range(50_000)] + [7]  # the 7 is never reached
    with pytest.raises(GroupsClaimError, match=f"more than {MAX_GROUPS} groups"):
        groups_from_claims({"groups": names}, "groups")


def test_claim_value_paths() -> None:
    doc = {"a": {"b": None}, "a.b": "top", "s": "text"}
    assert claim_value(doc, "a.b") == "top"  # the exact top-level name wins
    assert claim_value({"a": {"b": None}}, "a.b.c") is None
    with pytest.raises(GroupsClaimError, match="'s' is a string, not an object"):
        claim_value(doc, "s.x")


# ------------------------------------------------------------------ mTLS: the certificate


@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> dict[str, bytes]:
    """Client certificates from the dev PKI (certs/pki.py), as DER."""
    d = tmp_path_factory.mktemp("group-pki")
    pki.create_ca(d)
    issued = {
        "two-ous": ("CN=carol,OU=Payments,OU=eng,O=example", []),
        "one-ou": ("CN=dave,OU=eng,O=example", []),
        "no-ou": ("CN=svc,O=example", []),
        "spiffe": (
            "CN=svc,O=example",
            [
                x509.UniformResourceIdentifier("spiffe://example.org/ns/payments/sa/reader"),
                x509.DNSName("reader.payments.svc"),
                x509.RFC822Name("svc@example.org"),
            ],
        ),
        "escaped": (r"CN=x,OU=a\,b,O=example", []),
    }
    out = {}
    for name, (subject, san) in issued.items():
        cert_path, _ = pki.issue_client(d, name, subject, san=san)
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        out[name] = cert.public_bytes(Encoding.DER)
    return out


SPIFFE_RULES = r"RULE:^spiffe:\/\/example\.org\/ns\/([^\/]+)\/.*$/$1/,RULE:^[^:]+$/$0/L"


@pytest.mark.parametrize(
    ("rules", "sources", "cert", "groups"),
    [
        # every OU is a group, as it is
        (None, ["OU"], "two-ous", {"eng", "Payments"}),
        (None, ["ou"], "one-ou", {"eng"}),
        (None, ["OU"], "no-ou", set()),
        # the OU value, not its RFC 2253 spelling
        (None, ["OU"], "escaped", {"a,b"}),
        (None, ["O", "CN"], "two-ous", {"example", "carol"}),
        # the subject as the principal rules see it
        (None, ["DN"], "one-ou", {"CN=dave,OU=eng,O=example"}),
        # rules over the DN (the default source): every matching rule gives a group
        (
            r"RULE:^.*OU=Payments.*$/payments/,RULE:^.*O=example$/staff/,RULE:^.*OU=ops.*$/ops/",
            [],
            "two-ous",
            {"payments", "staff"},
        ),
        ("RULE:^CN=([^,]+),.*$/$1/U", [], "one-ou", {"DAVE"}),
        ("RULE:^nothing$/x/", [], "one-ou", set()),  # no rule matches: no group, no error
        ("RULE:^.*$/$0/,DEFAULT", ["CN"], "one-ou", {"dave"}),  # DEFAULT: the value itself
        # subjectAltName entries, with a rule per shape of value
        (SPIFFE_RULES, ["OU", "SAN:URI"], "spiffe", {"payments"}),
        (SPIFFE_RULES, ["OU", "SAN:URI"], "two-ous", {"payments", "eng"}),
        (None, ["SAN:DNS", "SAN:EMAIL"], "spiffe", {"reader.payments.svc", "svc@example.org"}),
        (None, ["SAN:URI"], "one-ou", set()),  # no subjectAltName at all
    ],
)
def test_certificate_groups(certificates, rules, sources, cert, groups) -> None:
    mapper = CertificateGroupMapper.from_settings(rules, sources)
    assert mapper is not None
    assert set(mapper.group_names(certificates[cert])) == groups
    assert groups_for_connection("SSL", certificates[cert], mapper) == {
        f"Group:{g}" for g in groups
    }


def test_certificate_groups_only_on_ssl_listeners_and_only_when_configured(certificates) -> None:
    assert CertificateGroupMapper.from_settings(None, []) is None
    mapper = CertificateGroupMapper.from_settings(None, ["OU"])
    cert = certificates["two-ous"]
    assert groups_for_connection("SASL_SSL", cert, mapper) == frozenset()
    assert groups_for_connection("SSL", None, mapper) == frozenset()  # no certificate
    assert groups_for_connection("SSL", cert, None) == frozenset()


def test_certificate_groups_past_the_bounds_refuse_the_connection(certificates) -> None:
    mapper = CertificateGroupMapper.from_settings("RULE:^(.*)$/$1$1$1$1$1$1$1$1$1$1/", ["DN"])
    assert mapper is not None
    with pytest.raises(TooManyGroupsError, match="a group name of"):
        groups_for_connection("SSL", certificates["two-ous"], mapper)
    with pytest.raises(CertificateGroupsError, match="cannot be read"):
        CertificateGroupMapper.from_settings(None, ["OU"]).group_names(b"not DER")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("rules", "sources", "setting", "problem"),
    [
        (None, ["XX"], "ssl_group_from", "'XX' is not a certificate group source"),
        ("RULE:^(.*$/$1/", [], "ssl_group_mapping_rules", "bad pattern"),
        ("nonsense", [], "ssl_group_mapping_rules", "Invalid rule"),
    ],
)
def test_certificate_group_settings_are_checked_at_start(rules, sources, setting, problem) -> None:
    config = ProxyConfig(
        upstream=[("127.0.0.1", 9092)],
        listener_security_protocol="SSL",
        ssl_certfile=Path(__file__),
        ssl_keyfile=Path(__file__),
        ssl_group_mapping_rules=rules,
        ssl_group_from=sources,
    )
    with pytest.raises(ConfigError) as caught:
        config.validate()
    assert caught.value.setting == setting and problem in str(caught.value)


def test_certificate_group_settings_need_an_ssl_listener() -> None:
    config = ProxyConfig(
        upstream=[("127.0.0.1", 9092)],
        listener_security_protocol="SASL_SSL",
        sasl_mechanisms="OAUTHBEARER",
        sasl_oauthbearer_jwks_file=Path(__file__),
        ssl_certfile=Path(__file__),
        ssl_keyfile=Path(__file__),
        ssl_group_from=["OU"],
    )
    with pytest.raises(ConfigError, match="ssl_group_from applies to SSL listeners only"):
        config.validate()
    assert parse_group_source(" san:uri ") == "SAN:URI"


# ------------------------------------------------------------------ the users file


def test_users_file_groups_round_trip(tmp_path: Path) -> None:
    f = tmp_path / "users.json"
    assert not add_user(f, "alice", "pw", ["PLAIN"], groups=["payments", "contractors"])
    add_user(f, "bob", "pw", ["SCRAM-SHA-256"], iterations=4096)
    doc = json.loads(f.read_text())
    assert doc["version"] == 1
    assert doc["users"]["alice"]["groups"] == ["contractors", "payments"]  # sorted, distinct
    assert "groups" not in doc["users"]["bob"]  # written only for a user with groups
    users = load_users(f)
    assert users.groups_for("alice") == ("contractors", "payments")
    assert users.groups_for("bob") == () and users.groups_for("nobody") == ()
    assert users.mechanisms("alice") == ["PLAIN"]  # groups are not a mechanism
    # a new password keeps the groups (a DENY on one must not stop applying)
    assert add_user(f, "alice", "new", ["PLAIN", "SCRAM-SHA-512"])
    assert load_users(f).groups_for("alice") == ("contractors", "payments")
    assert add_user(f, "alice", "new", ["PLAIN"], groups=["audit"])
    assert load_users(f).groups_for("alice") == ("audit",)
    assert set_groups(f, "bob", ["payments"]) and set_groups(f, "alice", [])
    users = load_users(f)
    assert users.groups_for("bob") == ("payments",) and users.groups_for("alice") == ()
    assert "groups" not in json.loads(f.read_text())["users"]["alice"]
    assert not set_groups(f, "nobody", ["x"])
    assert os.stat(f).st_mode & 0o777 == 0o600


def test_old_users_files_are_read_as_before(tmp_path: Path) -> None:
    f = tmp_path / "users.json"
    add_user(f, "alice", "pw", ["SCRAM-SHA-512"])
    before = f.read_text()
    users = load_users(f)
    assert users.names() == ["alice"] and users.groups_for("alice") == ()
    assert before == f.read_text() and "groups" not in before


@pytest.mark.parametrize(
    ("groups", "problem"),
    [
        ('"payments"', "corrupt groups for user 'a': not an array of names"),
        ("[7]", "a group name must be a string, not int"),
        ('[""]', "a group name must not be empty"),
        ('["a\\tb"]', "holds a control character"),
        (json.dumps(["x" * 256]), "a group name of 256 characters"),
        (json.dumps([f"g{i}" for i in range(257)]), "more than 256 groups"),
        ("[" * 500 + "]" * 500, "a group name must be a string, not list"),
    ],
)
def test_corrupt_groups_are_refused_naming_the_user(groups: str, problem: str) -> None:
    text = '{"version": 1, "users": {"a": {"groups": ' + groups + "}}}"
    with pytest.raises(UsersFileError, match="corrupt groups for user 'a'") as caught:
        parse_users(text)
    assert problem in str(caught.value)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_plain_and_scram_servers_give_the_users_groups(tmp_path: Path, mechanism: str) -> None:
    f = tmp_path / "users.json"
    add_user(f, "alice", "pw", [mechanism], iterations=4096, groups=["payments"])
    add_user(f, "bob", "pw", [mechanism], iterations=4096)
    users = ReloadingUsers(f)  # what the listener hands the servers
    for user, groups in (("alice", ("payments",)), ("bob", ())):
        server = create_server(mechanism, credentials=users)
        if mechanism == "PLAIN":
            server.evaluate(PlainSaslClient(user, "pw").initial_response())
        else:
            client = ScramSaslClient(mechanism, user, "pw")
            first = server.evaluate(client.initial_response())
            assert server.group_names() == ()  # not before the exchange is complete
            client.evaluate_challenge(server.evaluate(client.evaluate_challenge(first)))
        assert server.complete and server.group_names() == groups
    # a changed file applies to the next authentication
    set_groups(f, "bob", ["contractors"])
    server = create_server(mechanism, credentials=users)
    if mechanism == "PLAIN":
        server.evaluate(PlainSaslClient("bob", "pw").initial_response())
    else:
        client = ScramSaslClient(mechanism, "bob", "pw")
        first = server.evaluate(client.initial_response())
        client.evaluate_challenge(server.evaluate(client.evaluate_challenge(first)))
    assert server.group_names() == ("contractors",)
    # a wrong password gives no groups
    bad = create_server(mechanism, credentials=users)
    with pytest.raises(Exception):  # noqa: B017 - any failure will do
        if mechanism == "PLAIN":
            bad.evaluate(PlainSaslClient("alice", "wrong").initial_response())
        else:
            client = ScramSaslClient(mechanism, "alice", "wrong")
            bad.evaluate(client.evaluate_challenge(bad.evaluate(client.initial_response())))
    assert not bad.complete and bad.group_names() == ()


def cli(monkeypatch, capsys, *args: str, password: str | None = None) -> tuple[int, str, str]:
    if password is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(password + "\n"))
    status = main(["users", *args])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_users_cli_groups(tmp_path: Path, monkeypatch, capsys) -> None:
    f = str(tmp_path / "users.json")
    common = ("--users-file", f, "--password-stdin")
    assert cli(
        monkeypatch, capsys, "add", "alice", *common, "--group", "payments", "--group",
        "contractors", "--mechanism", "PLAIN", password="pw",
    ) == (0, "added user alice (PLAIN; groups contractors, payments)\n", "")  # fmt: skip
    assert cli(monkeypatch, capsys, "add", "bob", *common, password="pw") == (
        0,
        "added user bob (SCRAM-SHA-512)\n",
        "",
    )
    # a group name is one option's value as it is: commas and spaces are part of it
    assert cli(
        monkeypatch, capsys, "set-groups", "bob", "--users-file", f, "--group", "Domain Users, EMEA"
    ) == (0, "user bob: groups Domain Users, EMEA\n", "")  # fmt: skip
    status, out, _ = cli(monkeypatch, capsys, "list", "--users-file", f)
    assert status == 0
    assert out == "alice\tPLAIN\tcontractors\tpayments\nbob\tSCRAM-SHA-512\tDomain Users, EMEA\n"
    # a new password keeps the groups
    assert cli(monkeypatch, capsys, "add", "alice", *common, password="new")[0] == 0
    assert load_users(f).groups_for("alice") == ("contractors", "payments")
    assert cli(monkeypatch, capsys, "set-groups", "alice", "--users-file", f, "--none") == (
        0,
        "user alice: groups none\n",
        "",
    )
    status, out, _ = cli(monkeypatch, capsys, "list", "--users-file", f)
    assert out == "alice\tSCRAM-SHA-512\nbob\tSCRAM-SHA-512\tDomain Users, EMEA\n"
    # refusals
    status, _, err = cli(monkeypatch, capsys, "set-groups", "carol", "--users-file", f, "--none")
    assert status == 1 and "no user 'carol'" in err
    status, _, err = cli(
        monkeypatch, capsys, "add", "carol", *common, "--group", "x" * 256, password="pw"
    )
    assert status == 1 and "a group name of 256 characters" in err
    assert "carol" not in load_users(f).names()
    with pytest.raises(SystemExit):  # --group or --none: clearing is never implicit
        main(["users", "set-groups", "alice", "--users-file", f])
    with pytest.raises(SystemExit):
        main(["users", "set-groups", "alice", "--users-file", f, "--none", "--group", "x"])
