"""The one place a connection's principal is built, as Kafka's DefaultKafkaPrincipalBuilder
builds it (docs/identity.md): `User:ANONYMOUS` on PLAINTEXT and on an SSL listener without
a client certificate, `User:<mapped certificate subject>` with one, and after SASL
`User:<authorization id>`, which replaces the connection's principal. On an SSL listener
the certificate may also give the session groups (`groups_for_connection`).
"""

from __future__ import annotations

from aclgate.protocol.identity.certgroups import CertificateGroupMapper
from aclgate.protocol.identity.groups import NO_GROUPS, group_principals
from aclgate.protocol.identity.sslmapping import SslPrincipalMapper, subject_rfc2253

__all__ = [
    "ANONYMOUS",
    "USER_TYPE",
    "groups_for_connection",
    "principal_for_connection",
    "sasl_principal",
]

#: KafkaPrincipal.USER_TYPE: every principal Kafka's default builder makes is of this type
USER_TYPE = "User"
ANONYMOUS = f"{USER_TYPE}:ANONYMOUS"


def principal_for_connection(
    security_protocol: str, cert_der: bytes | None, mapper: SslPrincipalMapper | None
) -> str:
    """Who a new connection is before any SASL exchange.

    Only an SSL listener takes the principal from the certificate (SASL_SSL authenticates
    with SASL, as in Kafka). Raises NoMatchingRule when no mapping rule applies to the
    certificate (Kafka then fails the connection).
    """
    if security_protocol != "SSL" or cert_der is None:
        return ANONYMOUS
    assert mapper is not None  # an SSL listener always has its mapping rules
    return f"{USER_TYPE}:{mapper.get_name(subject_rfc2253(cert_der))}"


def groups_for_connection(
    security_protocol: str, cert_der: bytes | None, mapper: CertificateGroupMapper | None
) -> frozenset[str]:
    """The group principals a new connection's certificate gives (docs/identity.md, "Groups").

    Only on an SSL listener, where the certificate is the principal (as for the principal
    itself: on SASL_SSL the SASL identity is who the session is, and its groups are the SASL
    source's). Raises TooManyGroupsError past the bounds of groups.py, CertificateGroupsError
    for a certificate that cannot be read: the connection is refused (fail closed)."""
    if security_protocol != "SSL" or cert_der is None or mapper is None:
        return NO_GROUPS
    return group_principals(mapper.group_names(cert_der))


def sasl_principal(authorization_id: str) -> str:
    """The principal of a completed SASL exchange (every mechanism's authorization id)."""
    return f"{USER_TYPE}:{authorization_id}"
