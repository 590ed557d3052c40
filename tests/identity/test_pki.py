"""Dev PKI: `aclgate certs` round trips, permissions, chains, --force, errors."""

from __future__ import annotations

import datetime as dt
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from aclgate.certs import pki
from aclgate.proxy.cli import main


def aclgate(*args: str) -> int:
    return main(["certs", *args])


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def verify_signed_by(cert: x509.Certificate, ca: x509.Certificate) -> None:
    key = ca.public_key()
    if isinstance(key, ec.EllipticCurvePublicKey):
        key.verify(
            cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm)
        )
    else:
        assert isinstance(key, rsa.RSAPublicKey)
        key.verify(
            cert.signature,
            cert.tbs_certificate_bytes,
            padding.PKCS1v15(),
            cert.signature_hash_algorithm,
        )
    cert.verify_directly_issued_by(ca)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("key_type", ["ec", "rsa"])
def test_cli_round_trip(tmp_path: Path, capsys, key_type: str) -> None:
    d = tmp_path / "pki"
    assert aclgate("init", "--out", str(d), "--key-type", key_type) == 0
    assert (
        aclgate(
            "server",
            "--out",
            str(d),
            "--dns",
            "localhost",
            "kafka.example",
            "--ip",
            "127.0.0.1",
            "--ip",
            "::1",
            "--key-type",
            key_type,
        )
        == 0
    )
    assert (
        aclgate(
            "client",
            "--out",
            str(d),
            "--name",
            "alice",
            "--subject",
            "CN=alice,OU=eng,O=example",
            "--key-type",
            key_type,
        )
        == 0
    )
    out = capsys.readouterr().out.split()
    assert [Path(p).name for p in out] == [
        "ca.crt",
        "ca.key",
        "server.crt",
        "server.key",
        "alice.crt",
        "alice.key",
    ]
    for name in ("ca.key", "server.key", "alice.key"):
        assert mode(d / name) == 0o600
    for name in ("ca.crt", "server.crt", "alice.crt"):
        assert mode(d / name) == 0o644
    assert not [p for p in d.iterdir() if p.name.startswith(".")]  # no temp files left

    ca, server, alice = load(d / "ca.crt"), load(d / "server.crt"), load(d / "alice.crt")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    for leaf, usage in (
        (server, ExtendedKeyUsageOID.SERVER_AUTH),
        (alice, ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        verify_signed_by(leaf, ca)
        assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        assert list(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [usage]
        aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
        ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        assert aki.key_identifier == ski.digest
        leaf.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "kafka.example"]
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    assert alice.subject.rfc4514_string() == "CN=alice,OU=eng,O=example"
    now = dt.datetime.now(dt.UTC)
    assert alice.not_valid_before_utc <= now < alice.not_valid_after_utc


def test_openssl_verifies_chain(tmp_path: Path) -> None:
    pki.create_ca(tmp_path)
    pki.issue_server(tmp_path, dns=["localhost"])
    pki.issue_client(tmp_path, "bob", "CN=bob")
    res = subprocess.run(
        [
            "openssl",
            "verify",
            "-CAfile",
            str(tmp_path / "ca.crt"),
            str(tmp_path / "server.crt"),
            str(tmp_path / "bob.crt"),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr


def test_force(tmp_path: Path, capsys) -> None:
    assert aclgate("init", "--out", str(tmp_path)) == 0
    before = (tmp_path / "ca.crt").read_bytes()
    assert aclgate("init", "--out", str(tmp_path)) == 1
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (tmp_path / "ca.crt").read_bytes() == before
    assert aclgate("init", "--out", str(tmp_path), "--force") == 0
    assert (tmp_path / "ca.crt").read_bytes() != before
    assert aclgate("client", "--out", str(tmp_path), "--name", "a", "--subject", "CN=a") == 0
    assert aclgate("client", "--out", str(tmp_path), "--name", "a", "--subject", "CN=b") == 1
    assert load(tmp_path / "a.crt").subject.rfc4514_string() == "CN=a"
    assert (
        aclgate("client", "--out", str(tmp_path), "--name", "a", "--subject", "CN=b", "--force")
        == 0
    )
    assert load(tmp_path / "a.crt").subject.rfc4514_string() == "CN=b"


def test_errors(tmp_path: Path, capsys) -> None:
    assert aclgate("server", "--out", str(tmp_path), "--dns", "x") == 1
    assert "run `aclgate certs init" in capsys.readouterr().err
    (tmp_path / "sub").mkdir()
    assert (
        aclgate("client", "--out", str(tmp_path / "sub"), "--name", "a", "--subject", "CN=a") == 1
    )
    assert "no CA in" in capsys.readouterr().err
    pki.create_ca(tmp_path)
    for subject, message in [
        ("CN=a,X=1", "unknown attribute type 'X'"),
        ("garbage", "expected TYPE=value"),
        ("CN=a\\", "dangling backslash"),
        ("", "empty subject"),
    ]:
        assert aclgate("client", "--out", str(tmp_path), "--name", "a", "--subject", subject) == 1
        assert message in capsys.readouterr().err
    assert aclgate("server", "--out", str(tmp_path)) == 1
    assert "at least one --dns" in capsys.readouterr().err
    assert aclgate("server", "--out", str(tmp_path), "--ip", "not-an-ip") == 1
    assert "bad --ip" in capsys.readouterr().err
    assert aclgate("client", "--out", str(tmp_path), "--name", "../evil", "--subject", "CN=a") == 1
    assert "bad file name" in capsys.readouterr().err
    assert not list(tmp_path.glob("a.*"))


def test_expired_and_not_yet_valid(tmp_path: Path) -> None:
    pki.create_ca(tmp_path)
    assert (
        aclgate(
            "client", "--out", str(tmp_path), "--name", "old", "--subject", "CN=old", "--expired"
        )
        == 0
    )
    assert (
        aclgate(
            "client",
            "--out",
            str(tmp_path),
            "--name",
            "new",
            "--subject",
            "CN=new",
            "--not-yet-valid",
        )
        == 0
    )
    now = dt.datetime.now(dt.UTC)
    assert load(tmp_path / "old.crt").not_valid_after_utc < now
    assert load(tmp_path / "new.crt").not_valid_before_utc > now


@pytest.mark.parametrize(
    ("text", "rfc4514"),
    [
        ("CN=alice,OU=eng,O=example", "CN=alice,OU=eng,O=example"),
        ("cn=a+uid=b,dc=ex,DC=com", "CN=a+UID=b,DC=ex,DC=com"),
        ("CN=Tkac\\, Adam,O=x", "CN=Tkac\\, Adam,O=x"),
        ("CN=caf\\C3\\A9", "CN=café"),
        ("emailAddress=a@b.c,CN=q", "1.2.840.113549.1.9.1=a@b.c,CN=q"),
        ("1.2.3.4=#0c03616263,CN=x", "1.2.3.4=abc,CN=x"),
    ],
)
def test_parse_subject(text: str, rfc4514: str) -> None:
    assert pki.parse_subject(text).rfc4514_string() == rfc4514


def test_help_runs() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "aclgate", "certs", "--help"], capture_output=True, text=True
    )
    assert res.returncode == 0 and "development CA" in res.stdout


def test_client_san(tmp_path: Path) -> None:
    """`certs client --san TYPE:VALUE` (repeatable): the entries end up in the certificate's
    subjectAltName, where `serve --ssl-group-from SAN:URI|SAN:DNS|SAN:EMAIL` reads groups."""
    from ipaddress import ip_address

    from aclgate.protocol.identity.certgroups import CertificateGroupMapper

    pki.create_ca(tmp_path)
    spiffe = "spiffe://example.org/ns/payments/sa/app"
    args = ["client", "--out", str(tmp_path), "--name", "app", "--subject", "CN=app"]
    args += ["--san", f"URI:{spiffe}", "email:app@example.org", "--san", "DNS:app.example"]
    assert aclgate(*args, "--san", "IP:10.0.0.7") == 0
    cert = load(tmp_path / "app.crt")
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == [spiffe]
    assert san.get_values_for_type(x509.RFC822Name) == ["app@example.org"]
    assert san.get_values_for_type(x509.DNSName) == ["app.example"]
    assert san.get_values_for_type(x509.IPAddress) == [ip_address("10.0.0.7")]
    mapper = CertificateGroupMapper.from_settings(None, ["SAN:URI", "SAN:EMAIL"])
    assert mapper is not None
    assert mapper.values(cert) == [spiffe, "app@example.org"]
    # without --san, no subjectAltName at all (as before)
    assert aclgate("client", "--out", str(tmp_path), "--name", "b", "--subject", "CN=b") == 0
    with pytest.raises(x509.ExtensionNotFound):
        load(tmp_path / "b.crt").extensions.get_extension_for_class(x509.SubjectAlternativeName)


@pytest.mark.parametrize(
    ("san", "message"),
    [
        ("alice@example.org", "use TYPE:VALUE"),
        ("OU:eng", "use TYPE:VALUE"),
        ("URI:", "use TYPE:VALUE"),
        ("IP:not-an-ip", "does not appear to be an IPv4 or IPv6 address"),
        ("EMAIL:alice", "an e-mail address has an @"),
        ("URI:no-scheme", "a URI has a scheme"),
    ],
)
def test_client_san_errors(tmp_path: Path, capsys, san: str, message: str) -> None:
    pki.create_ca(tmp_path)
    args = ["client", "--out", str(tmp_path), "--name", "a", "--subject", "CN=a", "--san", san]
    assert aclgate(*args) == 1
    err = capsys.readouterr().err
    assert f"bad --san {san!r}" in err and message in err
    assert not list(tmp_path.glob("a.*"))
