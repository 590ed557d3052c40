"""The one place a connection's principal is built, as Kafka's DefaultKafkaPrincipalBuilder
builds it (docs/identity.md): `User:ANONYMOUS` on PLAINTEXT and on an SSL listener without
a client certificate, `User:<mapped certificate subject>` with one, and after SASL
`User:<authorization id>`, which replaces the connection's principal.
"""

from __future__ import annotations

from aclgate.protocol.identity.sslmapping import SslPrincipalMapper, subject_rfc2253

__all__ = ["ANONYMOUS", "USER_TYPE", "principal_for_connection", "sasl_principal"]

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


def sasl_principal(authorization_id: str) -> str:
    """The principal of a completed SASL exchange (every mechanism's authorization id)."""
    return f"{USER_TYPE}:{authorization_id}"
