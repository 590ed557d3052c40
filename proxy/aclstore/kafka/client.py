"""The `kafka` ACL store's connection settings, from the proxy's own upstream identity.

The store's reader and writer are librdkafka clients (proxy/aclstore/kafka/store.py). They log in to
the cluster holding the ACL topic as the proxy does to the fronted cluster: the same
--upstream-security-protocol, SASL user or OAuth client, and TLS files (docs/authz.md lists
the permissions that identity needs on the topic). Secrets are read once, at start: a
rotated password reaches the store's clients at the next restart.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from aclgate.proxy.config import ConfigError

if TYPE_CHECKING:
    from aclgate.proxy.aclstore.kafka.store import KafkaStoreSettings
    from aclgate.proxy.config import ProxyConfig


def _first_line(path: object, what: str, who: str) -> str:
    try:
        with open(str(path), encoding="utf-8") as f:
            line = f.readline().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"{who}: cannot read the {what} {path}: {exc}") from None
    if not line:
        raise ConfigError(f"{who}: the {what} {path} has an empty first line")
    return line


def client_config(
    config: ProxyConfig, client_id: str = "aclgate-acl-store", who: str = "ACL store"
) -> dict[str, str]:
    """librdkafka settings for the proxy's upstream identity (also the audit topic's, with its
    own client id; `who` names the user in errors)."""
    protocol = config.upstream_security_protocol
    out = {"security.protocol": protocol.lower(), "client.id": client_id}
    if protocol in ("SSL", "SASL_SSL"):
        files = {
            "ssl.ca.location": config.upstream_ssl_cafile,
            "ssl.certificate.location": config.upstream_ssl_certfile,
            "ssl.key.location": config.upstream_ssl_keyfile,
        }
        out.update({k: str(v) for k, v in files.items() if v is not None})
        out["ssl.endpoint.identification.algorithm"] = (
            "https" if config.upstream_ssl_check_hostname else "none"
        )
    if protocol.startswith("SASL"):
        mechanism = config.upstream_sasl_mechanism
        out["sasl.mechanism"] = mechanism
        if mechanism == "OAUTHBEARER":
            out["sasl.oauthbearer.method"] = "oidc"
            out["sasl.oauthbearer.token.endpoint.url"] = str(
                config.upstream_sasl_oauthbearer_token_endpoint_url
            )
            out["sasl.oauthbearer.client.id"] = str(config.upstream_sasl_oauthbearer_client_id)
            out["sasl.oauthbearer.client.secret"] = _first_line(
                config.upstream_sasl_oauthbearer_client_secret_file, "client secret file", who
            )
            if config.upstream_sasl_oauthbearer_scope:
                out["sasl.oauthbearer.scope"] = config.upstream_sasl_oauthbearer_scope
        else:
            out["sasl.username"] = str(config.upstream_sasl_username)
            out["sasl.password"] = _first_line(
                config.upstream_sasl_password_file, "password file", who
            )
    return out


def store_settings(config: ProxyConfig) -> KafkaStoreSettings:
    """The store's settings: --acl-topic on --acl-bootstrap (default: the --upstream cluster)."""
    from aclgate.proxy.aclstore.kafka.store import KafkaStoreSettings

    bootstrap = config.acl_bootstrap or ",".join(f"{h}:{p}" for h, p in config.upstream)
    return KafkaStoreSettings(
        bootstrap=bootstrap,
        topic=config.acl_topic,
        replication_factor=config.acl_topic_replication_factor,
        client=client_config(config),
        skip_offsets=frozenset(config.acl_topic_skip_offset),
        transactional_id=transactional_id(config),
        cidr_hosts=config.acl_host_cidr,
    )


def transactional_id(config: ProxyConfig) -> str | None:
    """This instance's writer id: --acl-transactional-id, else one from what tells instances
    apart and survives a restart (the host name and the --listen port: two instances on one
    host listen on different ports); None (random) when the port is 0, as a restart then
    listens elsewhere anyway. `aclgate serve --workers N` appends each worker's index."""
    from aclgate.proxy.aclstore.kafka.store import TRANSACTIONAL_ID_PREFIX

    if config.acl_transactional_id is not None:
        return config.acl_transactional_id
    port = config.listen[1]
    return f"{TRANSACTIONAL_ID_PREFIX}{socket.gethostname()}-{port}" if port else None
