"""A small development PKI: one CA, server certificates and client certificates.

Used by the tests and by TLS demos. Keys are EC P-256 by default (RSA 2048 on request), written
atomically with mode 0600; certificates are 0644. Nothing is overwritten unless `force` is set.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

from aclgate.files import write_atomically

__all__ = [
    "CA_CERT",
    "CA_KEY",
    "PkiError",
    "create_ca",
    "issue_client",
    "issue_server",
    "load_ca",
    "parse_subject",
    "write_private",
    "write_public",
]

CA_CERT, CA_KEY = "ca.crt", "ca.key"
CA_DAYS, LEAF_DAYS = 3650, 825  # 825 days: the longest leaf validity Apple's TLS policy accepts
_BACKDATE = dt.timedelta(minutes=5)  # tolerate small clock differences between hosts

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class PkiError(Exception):
    """A PKI operation failed; the message says what to do about it."""


# ---------------------------------------------------------------------------------------------
# subject strings ("CN=alice,OU=eng,O=example", RFC 4514)

_KEYWORDS = {
    "CN": NameOID.COMMON_NAME,
    "C": NameOID.COUNTRY_NAME,
    "L": NameOID.LOCALITY_NAME,
    "ST": NameOID.STATE_OR_PROVINCE_NAME,
    "S": NameOID.STATE_OR_PROVINCE_NAME,
    "O": NameOID.ORGANIZATION_NAME,
    "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
    "STREET": NameOID.STREET_ADDRESS,
    "DC": NameOID.DOMAIN_COMPONENT,
    "UID": NameOID.USER_ID,
    "E": NameOID.EMAIL_ADDRESS,
    "EMAIL": NameOID.EMAIL_ADDRESS,
    "EMAILADDRESS": NameOID.EMAIL_ADDRESS,
    "SERIALNUMBER": NameOID.SERIAL_NUMBER,
    "T": NameOID.TITLE,
    "TITLE": NameOID.TITLE,
    "GIVENNAME": NameOID.GIVEN_NAME,
    "SURNAME": NameOID.SURNAME,
    "INITIALS": NameOID.INITIALS,
    "GENERATION": NameOID.GENERATION_QUALIFIER,
    "DNQ": NameOID.DN_QUALIFIER,
    "DNQUALIFIER": NameOID.DN_QUALIFIER,
}
_OID_RE = re.compile(r"[0-2](\.(0|[1-9][0-9]*))+")
_STRING_TYPES = {t.value: t for t in _ASN1Type}
_HEX = "0123456789abcdefABCDEF"


def parse_subject(text: str) -> x509.Name:
    """Parse an RFC 4514 subject ("CN=alice+UID=a1,OU=eng,O=example"; most specific first).

    Keywords are case-insensitive; a dotted OID may take a `#hex` DER value of a string type.
    Raises PkiError naming the problem and its position.
    """
    rdns: list[list[x509.NameAttribute]] = [[]]
    i, n = 0, len(text)
    if not text.strip():
        raise PkiError("empty subject; expected something like 'CN=alice,OU=eng,O=example'")
    while True:
        eq = text.find("=", i)
        if eq < 0:
            raise PkiError(f"bad subject {text!r}: expected TYPE=value at position {i}")
        key = text[i:eq].strip()
        oid = _KEYWORDS.get(key.upper())
        if oid is None:
            if not _OID_RE.fullmatch(key):
                raise PkiError(f"bad subject {text!r}: unknown attribute type {key!r}")
            oid = ObjectIdentifier(key)
        value, i = _read_value(text, eq + 1)
        rdns[-1].append(_attribute(text, oid, value))
        if i >= n:
            break
        if text[i] == "+":
            i += 1
        elif text[i] == ",":
            rdns.append([])
            i += 1
        else:  # pragma: no cover - _read_value stops only at , + or the end
            raise PkiError(f"bad subject {text!r} at position {i}")
    try:
        return x509.Name([x509.RelativeDistinguishedName(r) for r in reversed(rdns)])
    except ValueError as e:
        raise PkiError(f"bad subject {text!r}: {e}") from None


def _read_value(text: str, i: int) -> tuple[str | bytes, int]:
    if i < len(text) and text[i] == "#":
        j = i + 1
        while j < len(text) and text[j] not in ",+":
            j += 1
        try:
            return bytes.fromhex(text[i + 1 : j].strip()), j
        except ValueError:
            raise PkiError(f"bad subject {text!r}: invalid #hex value at position {i}") from None
    out: list[str] = []
    raw = bytearray()  # \XX escapes form UTF-8 byte sequences
    start = i
    while i < len(text) and text[i] not in ",+":
        c = text[i]
        if c == "\\":
            pair = text[i + 1 : i + 3]
            if len(pair) == 2 and all(h in _HEX for h in pair):
                raw.append(int(pair, 16))
                i += 3
                continue
            if i + 1 >= len(text):
                raise PkiError(f"bad subject {text!r}: dangling backslash at the end")
            i += 1
            c = text[i]
        out.append(_flush(text, raw, start))
        out.append(c)
        i += 1
    out.append(_flush(text, raw, start))
    return "".join(out), i


def _flush(text: str, raw: bytearray, pos: int) -> str:
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PkiError(f"bad subject {text!r}: \\XX escapes at {pos} are not UTF-8") from None
    raw.clear()
    return decoded


def _attribute(text: str, oid: ObjectIdentifier, value: str | bytes) -> x509.NameAttribute:
    try:
        if isinstance(value, bytes):  # a DER TLV: only string types can be represented
            if len(value) < 2 or value[0] not in _STRING_TYPES or value[1] != len(value) - 2:
                raise ValueError("#hex values must be one short DER string (UTF8String, ...)")
            kind = _STRING_TYPES[value[0]]
            codec = "utf-16-be" if kind == _ASN1Type.BMPString else "utf-8"
            if kind == _ASN1Type.UniversalString:
                codec = "utf-32-be"
            return x509.NameAttribute(oid, value[2:].decode(codec), _type=kind)
        return x509.NameAttribute(oid, value)
    except (ValueError, UnicodeDecodeError) as e:
        raise PkiError(f"bad subject {text!r}: {e}") from None


# ---------------------------------------------------------------------------------------------
# files


_write_atomic = write_atomically


def write_private(path: Path, key: PrivateKey) -> None:
    """Write an unencrypted PKCS#8 PEM key readable by its owner only."""
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write_atomic(path, pem, 0o600)


def write_public(path: Path, cert: x509.Certificate) -> None:
    _write_atomic(path, cert.public_bytes(serialization.Encoding.PEM), 0o644)


def _check_targets(paths: Iterable[Path], force: bool) -> None:
    if force:
        return
    existing = [str(p) for p in paths if p.exists()]
    if existing:
        raise PkiError(f"refusing to overwrite {', '.join(existing)} (use --force)")


def _new_key(key_type: str) -> PrivateKey:
    if key_type == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    raise PkiError(f"unknown key type {key_type!r}; use 'ec' or 'rsa'")


def _out_dir(out: str | os.PathLike[str], create: bool) -> Path:
    path = Path(out)
    if create:
        path.mkdir(parents=True, exist_ok=True)
    elif not path.is_dir():
        raise PkiError(f"{path} is not a directory; run `aclgate certs init --out {path}` first")
    return path


def load_ca(out: str | os.PathLike[str]) -> tuple[x509.Certificate, PrivateKey]:
    """Load the CA certificate and key from a directory made by `create_ca`."""
    directory = _out_dir(out, create=False)
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    if not cert_path.exists() or not key_path.exists():
        raise PkiError(
            f"no CA in {directory} ({CA_CERT} and {CA_KEY} needed); "
            f"run `aclgate certs init --out {directory}` first"
        )
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError) as e:
        raise PkiError(f"cannot load the CA from {directory}: {e}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise PkiError(f"{key_path}: unsupported key type")
    public = cert.public_key()
    if (
        not isinstance(public, ec.EllipticCurvePublicKey | rsa.RSAPublicKey)
        or key.public_key().public_numbers() != public.public_numbers()
    ):
        raise PkiError(f"{key_path} does not belong to {cert_path}")
    return cert, key


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def create_ca(
    out: str | os.PathLike[str],
    *,
    common_name: str = "aclgate development CA",
    days: int = CA_DAYS,
    key_type: str = "ec",
    force: bool = False,
) -> tuple[Path, Path]:
    """Create `ca.crt` and `ca.key` in `out`; returns their paths."""
    directory = _out_dir(out, create=True)
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    _check_targets((cert_path, key_path), force)
    key = _new_key(key_type)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    write_private(key_path, key)
    write_public(cert_path, cert)
    return cert_path, key_path


def _issue(
    directory: Path,
    stem: str,
    subject: x509.Name,
    usage: ObjectIdentifier,
    san: list[x509.GeneralName],
    *,
    not_before: dt.datetime,
    not_after: dt.datetime,
    key_type: str,
    force: bool,
) -> tuple[Path, Path]:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", stem) or stem.startswith("ca."):
        raise PkiError(f"bad file name {stem!r}: use letters, digits, '.', '_' and '-'")
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    _check_targets((cert_path, key_path), force)
    ca_cert, ca_key = load_ca(directory)
    key = _new_key(key_type)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=key_type == "rsa",
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    write_private(key_path, key)
    write_public(cert_path, cert)
    return cert_path, key_path


#: `aclgate certs client --san TYPE:VALUE`: the types (OpenSSL's subjectAltName names), the
#: ones --ssl-group-from reads groups from (SAN:URI, SAN:DNS, SAN:EMAIL) and IP
SAN_TYPES = ("DNS", "IP", "URI", "EMAIL")


def parse_san(text: str) -> x509.GeneralName:
    """A subjectAltName entry from `TYPE:VALUE`: `DNS:kafka.example`, `IP:10.0.0.1`,
    `URI:spiffe://example.org/ns/payments/sa/app`, `EMAIL:alice@example.org` (the type in any
    case). PkiError saying what is wrong."""
    kind, sep, value = text.partition(":")
    kind = kind.strip().upper()
    if not sep or kind not in SAN_TYPES or not value:
        raise PkiError(
            f"bad --san {text!r}: use TYPE:VALUE with TYPE one of {', '.join(SAN_TYPES)}, "
            "e.g. URI:spiffe://example.org/sa/app or EMAIL:alice@example.org"
        )
    try:
        if kind == "IP":
            return x509.IPAddress(ipaddress.ip_address(value))
        if kind == "DNS":
            return x509.DNSName(value)
        if kind == "URI":
            if ":" not in value:
                raise ValueError("a URI has a scheme (spiffe://..., https://...)")
            return x509.UniformResourceIdentifier(value)
        if "@" not in value:
            raise ValueError("an e-mail address has an @")
        return x509.RFC822Name(value)
    except ValueError as exc:
        raise PkiError(f"bad --san {text!r}: {exc}") from None


def issue_server(
    out: str | os.PathLike[str],
    *,
    dns: Iterable[str] = (),
    ips: Iterable[str] = (),
    name: str = "server",
    days: int = LEAF_DAYS,
    key_type: str = "ec",
    force: bool = False,
) -> tuple[Path, Path]:
    """Issue `server.crt`/`server.key` (serverAuth) for the given DNS names and IP addresses."""
    directory = _out_dir(out, create=False)
    dns, ips = list(dns), list(ips)
    if not dns and not ips:
        raise PkiError("a server certificate needs at least one --dns name or --ip address")
    san: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    for ip in ips:
        try:
            san.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError:
            raise PkiError(f"bad --ip {ip!r}: not an IP address") from None
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (dns or ips)[0][:64])])
    now = _now()
    return _issue(
        directory,
        name,
        subject,
        ExtendedKeyUsageOID.SERVER_AUTH,
        san,
        not_before=now - _BACKDATE,
        not_after=now + dt.timedelta(days=days),
        key_type=key_type,
        force=force,
    )


def issue_client(
    out: str | os.PathLike[str],
    name: str,
    subject: str | x509.Name,
    *,
    days: int = LEAF_DAYS,
    validity: str = "valid",
    key_type: str = "ec",
    force: bool = False,
    san: Iterable[x509.GeneralName] = (),
) -> tuple[Path, Path]:
    """Issue `NAME.crt`/`NAME.key` (clientAuth) with the given subject.

    `validity` is "valid", "expired" (ended yesterday) or "not-yet-valid" (starts tomorrow),
    the last two for tests of refused certificates. `san`: subjectAltName entries (e.g.
    `x509.UniformResourceIdentifier("spiffe://example.org/ns/payments/sa/app")`), none by
    default.
    """
    directory = _out_dir(out, create=False)
    name_obj = parse_subject(subject) if isinstance(subject, str) else subject
    now = _now()
    day = dt.timedelta(days=1)
    if validity == "valid":
        window = (now - _BACKDATE, now + dt.timedelta(days=days))
    elif validity == "expired":
        window = (now - dt.timedelta(days=days) - day, now - day)
    elif validity == "not-yet-valid":
        window = (now + day, now + day + dt.timedelta(days=days))
    else:
        raise PkiError(f"unknown validity {validity!r}")
    return _issue(
        directory,
        name,
        name_obj,
        ExtendedKeyUsageOID.CLIENT_AUTH,
        list(san),
        not_before=window[0],
        not_after=window[1],
        key_type=key_type,
        force=force,
    )
