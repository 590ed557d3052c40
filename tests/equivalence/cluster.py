"""An authorizing Apache Kafka whose PLAINTEXT clients (User:ANONYMOUS) are NOT super users.

The plain `KafkaCluster(authorizer=True)` makes `User:ANONYMOUS` a super user, because its
INTERNAL and CONTROLLER listeners are PLAINTEXT and `super.users` is broker-wide. To compare
aclgate's decisions for `User:ANONYMOUS` (the only principal of a PLAINTEXT proxy) with
Kafka's, this variant moves the broker's own traffic to SASL:

    PLAINTEXT   client listener; principal User:ANONYMOUS, subject to the ACLs
    SSL         optional mTLS client listener (`mtls_config`): the certificate's principal
    INTERNAL    SASL_PLAINTEXT/PLAIN, inter-broker listener, User:admin (super user)
    CONTROLLER  SASL_PLAINTEXT/PLAIN, broker -> controller, User:admin (super user)

`super.users=User:admin` only. Admin helpers (`admin()`, `create_topic`, `acls`) use the
INTERNAL listener as `admin`; the start-up probe uses the PLAINTEXT listener (ApiVersions and a
no-topic Metadata need no authorization).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from confluent_kafka.admin import AdminClient

from tests.kafka.acls import KafkaAcls
from tests.kafka.cluster import INTERNAL, KafkaCluster, Listener

ADMIN_USER = "admin"
ADMIN_PASSWORD = "admin-secret"
_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'username="{ADMIN_USER}" password="{ADMIN_PASSWORD}" '
    f'user_{ADMIN_USER}="{ADMIN_PASSWORD}";'
)
BROKER_CONFIG: dict[str, str] = {
    "listener.security.protocol.map": (
        "INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT"
    ),
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "sasl.mechanism.controller.protocol": "PLAIN",
    "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
    "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
    "listener.name.internal.plain.sasl.jaas.config": _JAAS,
    "listener.name.controller.plain.sasl.jaas.config": _JAAS,
    "super.users": f"User:{ADMIN_USER}",
    "allow.everyone.if.no.acl.found": "false",
}


def mtls_config(client_ca: str, mapping_rules: str) -> dict[str, str]:
    """broker_config for an SSL client listener that requires a client certificate signed by
    `client_ca` and maps its subject with `ssl.principal.mapping.rules`."""
    return {
        "listener.security.protocol.map": (
            "INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL"
        ),
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.ssl.ssl.truststore.type": "PEM",
        "listener.name.ssl.ssl.truststore.location": client_ca,
        "listener.name.ssl.ssl.principal.mapping.rules": mapping_rules,
    }


class AnonymousAuthzCluster(KafkaCluster):
    """StandardAuthorizer; PLAINTEXT clients are User:ANONYMOUS without super-user rights.
    `listeners=("PLAINTEXT", "SSL")` with `mtls_config(...)` in `broker_config` adds an mTLS
    client listener whose principals come from the certificates."""

    def __init__(self, listeners: tuple[str, ...] = ("PLAINTEXT",), **kwargs: Any) -> None:
        config = {**BROKER_CONFIG, **kwargs.pop("broker_config", {})}
        super().__init__(
            listeners=listeners,
            authorizer=True,
            super_users=(f"User:{ADMIN_USER}",),
            broker_config=config,
            **kwargs,
        )
        self.super_users = (f"User:{ADMIN_USER}",)

    def _server_properties(self, node, ports, voters, server_pem):
        # Called once the listeners are laid out: describe INTERNAL as the SASL listener it is.
        lst = self.listeners[INTERNAL]
        if lst.security_protocol != "SASL_PLAINTEXT":
            self.listeners[INTERNAL] = replace(
                lst,
                security_protocol="SASL_PLAINTEXT",
                mechanisms=("PLAIN",),
                users={ADMIN_USER: ADMIN_PASSWORD},
            )
        return super()._server_properties(node, ports, voters, server_pem)

    @property
    def probe_listener(self) -> Listener:
        return self.client_listener

    def admin_config(self, **extra: Any) -> dict[str, Any]:
        """confluent-kafka config for the super user on INTERNAL."""
        return self.internal.confluent_config(user=ADMIN_USER, mechanism="PLAIN", **extra)

    def admin(self, **extra: Any) -> AdminClient:
        return AdminClient(self.admin_config(**extra))

    @property
    def acls(self) -> KafkaAcls:
        if self._acls is None:
            self._acls = _SaslAcls(self)
        return self._acls


class _SaslAcls(KafkaAcls):
    """KafkaAcls whose Admin clients authenticate as the super user on INTERNAL."""

    def __init__(self, cluster: AnonymousAuthzCluster, timeout: float = 30.0) -> None:
        self.cluster = cluster
        self.timeout = timeout
        self._admins = [
            AdminClient(cluster.admin_config(**{"bootstrap.servers": cluster.internal.address(i)}))
            for i in cluster.node_ids
        ]
        self.admin = self._admins[0]
