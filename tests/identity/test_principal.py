"""mTLS principals: RFC 2253 subjects compared with Java, and Kafka's SslPrincipalMapper."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID, ObjectIdentifier
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aclgate.protocol.identity.principal import ANONYMOUS, principal_for_connection, sasl_principal
from aclgate.protocol.identity.sslmapping import (
    NoMatchingRule,
    SslPrincipalMapper,
    name_rfc2253,
    subject_rfc2253,
)

from .conftest import JavaError

_KEY = ec.generate_private_key(ec.SECP256R1())
A = x509.NameAttribute
RDN = x509.RelativeDistinguishedName


def cert_with(name: x509.Name) -> bytes:
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(x509.Name([A(NameOID.COMMON_NAME, "issuer")]))
        .public_key(_KEY.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(_KEY, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.DER)


def name(*rdns: list[x509.NameAttribute] | x509.NameAttribute) -> x509.Name:
    """Build a Name from RDNs given most specific first (the way it is printed)."""
    return x509.Name([RDN(r if isinstance(r, list) else [r]) for r in reversed(rdns)])


CN, OU, ORG, C = (
    NameOID.COMMON_NAME,
    NameOID.ORGANIZATIONAL_UNIT_NAME,
    NameOID.ORGANIZATION_NAME,
    NameOID.COUNTRY_NAME,
)
DC, UID, EMAIL = NameOID.DOMAIN_COMPONENT, NameOID.USER_ID, NameOID.EMAIL_ADDRESS

# (name, the string Java prints). The expected strings were checked against OpenJDK 17; the
# test below re-asks the JDK every time it is available.
SUBJECTS = [
    (name(A(CN, "alice"), A(OU, "eng"), A(ORG, "example")), "CN=alice,OU=eng,O=example"),
    (name(A(CN, "Tkac, Adam"), A(OU, "ITZ")), "CN=Tkac\\, Adam,OU=ITZ"),
    (name(A(CN, 'a+b "q" <x> ;s \\b')), 'CN=a\\+b \\"q\\" \\<x\\> \\;s \\\\b'),
    (name(A(CN, "#hash and a=b #2")), "CN=\\#hash and a\\=b \\#2"),
    (name(A(CN, "  spaced  "), A(ORG, "x")), "CN=\\ \\ spaced\\ \\ ,O=x"),
    (name([A(CN, "alice"), A(UID, "a1")], A(ORG, "example")), None),
    (
        name(A(EMAIL, "alice@example.com"), A(CN, "alice")),
        "1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,CN=alice",
    ),
    (name(A(UID, "jdoe"), A(DC, "example"), A(DC, "com")), "UID=jdoe,DC=example,DC=com"),
    (name(A(CN, "Ünïcødé 雪 ☃"), A(ORG, "Ørg")), "CN=Ünïcødé 雪 ☃,O=Ørg"),
    (
        name(
            A(CN, "svc"),
            A(NameOID.STREET_ADDRESS, "1 Main St"),
            A(NameOID.LOCALITY_NAME, "Fulton"),
            A(NameOID.STATE_OR_PROVINCE_NAME, "MD"),
            A(C, "US"),
        ),
        "CN=svc,STREET=1 Main St,L=Fulton,ST=MD,C=US",
    ),
    (name(A(CN, "bmp ü", _type=_ASN1Type.BMPString)), "CN=\\00b\\00m\\00p\\00 \\00\ufffd"),
    (name(A(CN, "printable", _type=_ASN1Type.PrintableString)), "CN=printable"),
    (name(A(CN, "ia5", _type=_ASN1Type.IA5String)), "CN=ia5"),
    (
        name(A(CN, "univ", _type=_ASN1Type.UniversalString)),
        None,
    ),
    (name(A(ObjectIdentifier("1.2.3.4"), "x"), A(CN, "n")), "1.2.3.4=#0c0178,CN=n"),
    (name(A(NameOID.SERIAL_NUMBER, "1234"), A(NameOID.TITLE, "boss"), A(CN, "t")), None),
    (name([A(CN, "a"), A(OU, "b"), A(ObjectIdentifier("1.2.3.4"), "c")], A(ORG, "o")), None),
    (name(A(CN, "tab\there\r"), A(ORG, "cr\r")), None),
    (name(A(CN, "nul\x00byte")), "CN=nul\\00byte"),
    (name(A(CN, "trailing#"), A(OU, " ")), None),
    (x509.Name([]), ""),
]


@pytest.mark.parametrize(("subject", "expected"), SUBJECTS, ids=range(len(SUBJECTS)))
def test_subject_matches_java(oracle, subject: x509.Name, expected: str | None) -> None:
    der = cert_with(subject)
    ours = subject_rfc2253(der)
    java = oracle.ask("dn", der)
    assert ours == java
    if expected is not None:
        assert ours == expected


@pytest.mark.parametrize(("subject", "expected"), [s for s in SUBJECTS if s[1] is not None])
def test_subject_known_strings(subject: x509.Name, expected: str) -> None:
    """The same strings without Java, so a machine without a JDK still checks them."""
    assert name_rfc2253(subject.public_bytes()) == expected


_TEXT = st.text(
    alphabet=st.sampled_from([*'aZ09 ,+="\\<>;#\r\t-_.é雪', "\U0001f600"]),
    min_size=1,
    max_size=12,
)
_OIDS = st.sampled_from(
    [
        CN,
        OU,
        ORG,
        DC,
        UID,
        EMAIL,
        NameOID.LOCALITY_NAME,
        NameOID.TITLE,
        ObjectIdentifier("1.3.6.1.4.1.99.1"),
    ]
)
_TYPES = st.sampled_from([None, _ASN1Type.UTF8String, _ASN1Type.BMPString])


@st.composite
def random_names(draw) -> x509.Name:
    rdns = []
    for _ in range(draw(st.integers(1, 4))):
        avas = []
        for _ in range(draw(st.integers(1, 3))):
            oid, kind = draw(_OIDS), draw(_TYPES)
            value = draw(_TEXT)
            if oid in (DC, EMAIL):
                value, kind = value.encode("ascii", "replace").decode(), _ASN1Type.IA5String
            ava = A(oid, value) if kind is None else A(oid, value, _type=kind)
            if ava not in avas:
                avas.append(ava)
        rdns.append(RDN(avas))
    return x509.Name(rdns)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(random_names())
def test_random_subjects_match_java(oracle, subject: x509.Name) -> None:
    der = cert_with(subject)
    assert subject_rfc2253(der) == oracle.ask("dn", der)


def test_pki_client_subject(pki_dir) -> None:
    der = x509.load_pem_x509_certificate((pki_dir / "alice.crt").read_bytes()).public_bytes(
        serialization.Encoding.DER
    )
    assert subject_rfc2253(der) == "CN=alice,OU=eng,O=example"
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=([^,]*),.*$/$1/U,DEFAULT")
    assert principal_for_connection("SSL", der, mapper) == "User:ALICE"
    assert principal_for_connection("SSL", None, mapper) == ANONYMOUS == "User:ANONYMOUS"
    # only an SSL listener takes the principal from a certificate (SASL_SSL: from SASL)
    assert principal_for_connection("SASL_SSL", der, mapper) == ANONYMOUS
    assert principal_for_connection("PLAINTEXT", None, None) == ANONYMOUS
    assert sasl_principal("alice") == "User:alice"
    assert principal_for_connection("SSL", der, SslPrincipalMapper.from_rules(None)) == (
        "User:CN=alice,OU=eng,O=example"
    )


# --- SslPrincipalMapperTest, ported -----------------------------------------------------------

VALID_RULES = [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
]
INVALID_RULES = [
    "default",
    "DEFAUL",
    "DEFAULT/L",
    "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
]


@pytest.mark.parametrize("rules", VALID_RULES)
def test_valid_rules(rules: str) -> None:
    SslPrincipalMapper.from_rules(rules)


@pytest.mark.parametrize("rules", INVALID_RULES)
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper.from_rules(rules)


def test_invalid_rule_messages() -> None:
    with pytest.raises(ValueError) as e:
        SslPrincipalMapper.from_rules("DEFAULT/L")
    assert str(e.value) == "Invalid rule: `DEFAULT/L`, unmatched substring: `/L`"


def test_ssl_principal_mapper() -> None:
    rules = ", ".join(
        [
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
            "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
            "DEFAULT",
        ]
    )
    mapper = SslPrincipalMapper.from_rules(rules)
    assert mapper.get_name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.get_name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.get_name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.get_name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert (
        mapper.get_name("OU=JavaSoft,O=Sun Microsystems,C=US")
        == "OU=JavaSoft,O=Sun Microsystems,C=US"
    )


SPLITTING = [
    ("[]", ""),
    ("[DEFAULT]", "DEFAULT"),
    ("[RULE:/]", "RULE://"),
    ("[RULE:/.*]", "RULE:/.*/"),
    ("[RULE:/.*/L]", "RULE:/.*/L"),
    ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
    ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
    ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
    ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
    (
        "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
        "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
    ),
    ("[]", ",   , , ,      , , ,   "),
    ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
    ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
    ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
    ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
    ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
    (
        "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
        "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT",
    ),
]


@pytest.mark.parametrize(("expected", "rules"), SPLITTING)
def test_rules_splitting(expected: str, rules: str) -> None:
    assert str(SslPrincipalMapper.from_rules(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_comma_with_whitespace() -> None:
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.get_name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_no_matching_rule() -> None:
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=(x)$/$1/")
    with pytest.raises(
        NoMatchingRule, match=r"No rules apply to CN=y, rules \[RULE:\^CN=\(x\)\$/\$1\]"
    ):
        mapper.get_name("CN=y")


# --- against Kafka's own SslPrincipalMapper -----------------------------------------------------

MAPPINGS = [
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT", "CN=Duke,OU=ServiceUsers,O=Org,C=US"),
    ("RULE:^CN=(.*?),(.*)$/$1@$2/", "CN=a,OU=b,O=c"),
    ("RULE:^CN=(.*?),.*$/$1-$3-$12/", "CN=a,OU=b"),  # back references beyond the group count
    ("RULE:^CN=(.)(.)(.).*$/$1$23$4$0/", "CN=abcdef"),
    ("RULE:(.*?)/x/", "abc"),  # a lazy pattern: replaceAll inserts at every empty match
    ("RULE:^(CN=)(.*)$/$2\\$1/U", "CN=bob"),
    ("RULE:^CN=([^,]+).*$/${name}/", "CN=bob"),
    ("RULE:^CN=(?<name>[^,]+).*$/x/", "CN=bob"),
    ("RULE:.*/$/", "anything"),
    ("RULE:(.*)/\\/", "a"),
    ("RULE:^CN=(\\w+)$/$1/L", "CN=ÄBC"),
    ("RULE:^CN=(\\w+)\\s*$/$1/L", "CN=ABC "),
    ("RULE:^cn=(.*)$/$1/", "CN=x"),
    ("RULE:x/y/, RULE:^.*$/z/U, DEFAULT", "q"),
    ("", "CN=none"),
    ("RULE:^CN=(.*)$/$1/,", "CN=comma"),
]


@pytest.mark.parametrize(("rules", "dn"), MAPPINGS)
def test_mapping_matches_kafka(oracle, rules: str, dn: str) -> None:
    oracle.require_kafka()
    try:
        expected: str | None = oracle.ask("map", rules, dn)
    except JavaError:
        expected = None
    try:
        ours: str | None = SslPrincipalMapper.from_rules(rules).get_name(dn)
    except (ValueError, IndexError):
        ours = None
    assert ours == expected


@pytest.mark.parametrize("rules", VALID_RULES + [r for _, r in SPLITTING])
def test_rules_to_string_matches_kafka(oracle, rules: str) -> None:
    oracle.require_kafka()
    assert str(SslPrincipalMapper.from_rules(rules)) == oracle.ask("rules", rules)
