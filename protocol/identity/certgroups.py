"""A client certificate's groups on an SSL listener (docs/identity.md, "Groups").

Two settings, in the style of Kafka's `ssl.principal.mapping.rules`:

* `ssl_group_from`: where the candidate values come from: `DN` (the subject in RFC 2253
  form, exactly the string the principal rules see), a subject attribute (`OU`, `O`, `CN`,
  `DC`, `L`, `ST`, `C`, `STREET`, `UID`: one value per occurrence, so several OUs give several
  values), or a subjectAltName entry type (`SAN:URI`, `SAN:DNS`, `SAN:EMAIL`: one value per
  entry). Several sources may be given. Default: `DN`.
* `ssl_group_mapping_rules`: Kafka's rule syntax (`RULE:pattern/replacement/[LU]`,
  `DEFAULT`), applied to every value; unlike the principal rules, *every* rule whose pattern
  matches the whole value contributes a group, and a value no rule matches contributes none
  (it is not an error). `DEFAULT` contributes the value unchanged. Default: `DEFAULT` (each
  value is a group as it is).

Neither set: certificates give no groups. The names are bounded where every source's are
(protocol/identity/groups.py); past the bounds the connection is refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID

from aclgate.protocol.identity.sslmapping import MappingRule, name_rfc2253, parse_rules

__all__ = [
    "SOURCES",
    "CertificateGroupMapper",
    "CertificateGroupsError",
    "parse_group_source",
]

#: subject attributes by the keyword RFC 2253 (and so the DN the rules see) prints for them
SUBJECT_ATTRIBUTES = {
    "CN": NameOID.COMMON_NAME,
    "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
    "O": NameOID.ORGANIZATION_NAME,
    "L": NameOID.LOCALITY_NAME,
    "ST": NameOID.STATE_OR_PROVINCE_NAME,
    "C": NameOID.COUNTRY_NAME,
    "STREET": NameOID.STREET_ADDRESS,
    "DC": NameOID.DOMAIN_COMPONENT,
    "UID": NameOID.USER_ID,
}
#: subjectAltName entry types
SAN_TYPES: dict[
    str, type[x509.UniformResourceIdentifier] | type[x509.DNSName] | type[x509.RFC822Name]
] = {
    "SAN:URI": x509.UniformResourceIdentifier,
    "SAN:DNS": x509.DNSName,
    "SAN:EMAIL": x509.RFC822Name,
}
DN = "DN"
SOURCES = (DN, *SUBJECT_ATTRIBUTES, *SAN_TYPES)


class CertificateGroupsError(ValueError):
    """The certificate's subject or subjectAltName could not be read for its groups."""


def parse_group_source(text: str) -> str:
    """A `ssl_group_from` value, normalized (`ou` -> `OU`, `san:uri` -> `SAN:URI`)."""
    source = text.strip().upper()
    if source not in SOURCES:
        raise ValueError(
            f"{text!r} is not a certificate group source; use one of {', '.join(SOURCES)}"
        )
    return source


@dataclass(frozen=True)
class CertificateGroupMapper:
    """The values `sources` select, each rewritten by every matching rule of `rules`."""

    sources: tuple[str, ...]
    rules: tuple[MappingRule, ...]

    @classmethod
    def from_settings(
        cls, rules: str | None, sources: Iterable[str] = ()
    ) -> CertificateGroupMapper | None:
        """None when neither is set (no certificate groups). ValueError for a source that is
        not one of SOURCES or a rule that does not parse (Kafka's messages)."""
        chosen = tuple(dict.fromkeys(parse_group_source(s) for s in sources))
        if not chosen and rules is None:
            return None
        parsed = tuple(parse_rules("DEFAULT" if rules is None else rules))
        if not parsed:
            raise ValueError("no rule in ssl_group_mapping_rules")
        return cls(chosen or (DN,), parsed)

    def values(self, cert: x509.Certificate) -> list[str]:
        """The candidate values of `cert`, source by source."""
        out: list[str] = []
        try:
            for source in self.sources:
                if source == DN:
                    out.append(name_rfc2253(cert.subject.public_bytes()))
                elif source in SUBJECT_ATTRIBUTES:
                    attributes = cert.subject.get_attributes_for_oid(SUBJECT_ATTRIBUTES[source])
                    out.extend(a.value for a in attributes if isinstance(a.value, str))
                else:
                    try:
                        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
                    except x509.ExtensionNotFound:
                        continue
                    out.extend(str(v) for v in san.value.get_values_for_type(SAN_TYPES[source]))
        except ValueError as exc:  # a subject or extension cryptography cannot decode
            raise CertificateGroupsError(f"the client certificate cannot be read: {exc}") from None
        return out

    def group_names(self, cert_der: bytes) -> tuple[str, ...]:
        """The group names of a (verified) client certificate, distinct, in source order."""
        try:
            cert = x509.load_der_x509_certificate(cert_der)
        except ValueError as exc:
            raise CertificateGroupsError(f"the client certificate cannot be read: {exc}") from None
        names: list[str] = []
        for value in self.values(cert):
            for rule in self.rules:
                try:
                    name = rule.apply(value)
                except (ValueError, IndexError) as exc:  # a replacement Java would refuse too
                    raise CertificateGroupsError(
                        f"ssl_group_mapping_rules rule {rule} on {value!r}: {exc}"
                    ) from None
                if name:
                    names.append(name)
        return tuple(dict.fromkeys(names))
