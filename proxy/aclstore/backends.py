"""Open the ACL store backend the configuration names (`--acl-store file|kafka`).

The contract every backend keeps is proxy/aclstore/backend.py; each backend lives in a module of its
own and is imported only when chosen.
"""

from __future__ import annotations

from aclgate.authz.authorizer import Authorizer
from aclgate.proxy.aclstore.backend import AclBackend, AclStoreError
from aclgate.proxy.config import ProxyConfig


def open_acl_backend(config: ProxyConfig, authorizer: Authorizer) -> AclBackend | None:
    """The backend `config.acl_store` names, loading into `authorizer`; None when no ACL
    store is configured (no --acl-file for `file`): the proxy then has an empty policy and
    answers the ACL Admin API as a broker without an authorizer does."""
    if config.acl_store == "file":
        if config.acl_file is None:
            return None
        from aclgate.proxy.aclstore.filebackend import FileAclBackend

        return FileAclBackend(config.acl_file, authorizer, missing_ok=config.acl_file_missing_ok)
    if config.acl_store == "kafka":
        from aclgate.proxy.aclstore.kafka.client import store_settings
        from aclgate.proxy.aclstore.kafka.store import KafkaAclBackend

        return KafkaAclBackend(store_settings(config), authorizer)
    raise AclStoreError(f"ACL store backend {config.acl_store!r} is not available")


def protected_topics(config: ProxyConfig) -> frozenset[str]:
    """The topics aclgate keeps for itself, which no ACL can open through the proxy
    (protocol/enforce/protected.py): the `kafka` store's topic and the audit topic
    (--audit-topic), also when they live on another cluster (a topic of that name on the
    fronted one is then just as untouchable)."""
    topics = {config.acl_topic} if config.acl_store == "kafka" else set()
    if config.audit_topic is not None:
        topics.add(config.audit_topic)
    return frozenset(topics)
