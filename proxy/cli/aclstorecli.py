"""Where `aclgate acls` reads and changes ACLs: an ACL file, or any Kafka-protocol endpoint
serving the ACL Admin API (an aclgate proxy, whatever its store, or a Kafka cluster).

Both offer the same three calls the command needs: `describe(filters)`, `create(bindings)`,
`delete(filters)`. The Admin API side speaks through kafka-python's KafkaAdminClient (its ACL
enums carry Kafka's codes, every resource type included), configured from a Java client
properties file as kafka-acls' `--command-config` is (`client_config`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from aclgate.authz.model import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.proxy.aclstore import AclFileStore


class AclStoreCliError(Exception):
    """The store could not be read or changed; the message says why."""


class AclStoreClient(Protocol):
    def describe(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """The ACLs matching any of `filters` (every ACL when there is none)."""

    def create(self, bindings: Sequence[AclBinding]) -> None: ...

    def delete(self, filters: Sequence[AclBindingFilter]) -> None: ...


class FileAcls:
    """An ACL file (locked read-modify-write: proxy/aclstore.py)."""

    def __init__(self, path: str | Path) -> None:
        self.store = AclFileStore(path)

    def describe(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        bindings = self.store.load()
        if filters:
            bindings = [b for b in bindings if any(f.matches(b) for f in filters)]
        return bindings

    def create(self, bindings: Sequence[AclBinding]) -> None:
        self.store.modify(lambda current: current + list(bindings), create=True)

    def delete(self, filters: Sequence[AclBindingFilter]) -> None:
        self.store.modify(lambda cur: [b for b in cur if not any(f.matches(b) for f in filters)])


# ------------------------------------------------------------------- --command-config


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java .properties file: `key=value` or `key: value` lines, `#`/`!` comments,
    backslash line continuations."""
    out: dict[str, str] = {}
    pending = ""
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
        if match is None:
            out[line] = ""
        else:
            out[match[1]] = match[2]
    return out


_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def client_config(bootstrap: str, properties: dict[str, str] | None = None) -> dict[str, Any]:
    """KafkaAdminClient settings for `bootstrap` and a Java client configuration. A property
    this cannot carry over is an error, never silently dropped (fail closed)."""
    props = dict(properties or {})
    config: dict[str, Any] = {"bootstrap_servers": bootstrap.split(",")}
    protocol = props.pop("security.protocol", "PLAINTEXT").upper()
    config["security_protocol"] = protocol
    mechanism = props.pop("sasl.mechanism", "GSSAPI" if "SASL" in protocol else None)
    jaas = props.pop("sasl.jaas.config", None)
    if "SASL" in protocol:
        if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise AclStoreCliError(
                f"sasl.mechanism {mechanism}: aclgate acls speaks PLAIN and SCRAM-SHA-256/512"
            )
        options = dict(_JAAS_OPTION.findall(jaas or ""))
        if "username" not in options or "password" not in options:
            raise AclStoreCliError('sasl.jaas.config must give username="..." password="..."')
        config.update(
            sasl_mechanism=mechanism,
            sasl_plain_username=options["username"],
            sasl_plain_password=options["password"],
        )
    if "SSL" in protocol:
        store_type = props.pop("ssl.truststore.type", "PEM").upper()
        location = props.pop("ssl.truststore.location", None)
        if location is not None:
            if store_type != "PEM":
                raise AclStoreCliError("ssl.truststore.type must be PEM (a CA file)")
            config["ssl_cafile"] = location
        algorithm = props.pop("ssl.endpoint.identification.algorithm", "https")
        config["ssl_check_hostname"] = bool(algorithm)
    for harmless in ("client.id", "request.timeout.ms"):
        props.pop(harmless, None)
    if props:
        raise AclStoreCliError(
            f"--command-config: cannot use {', '.join(sorted(props))} (supported: "
            "security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.type/location, "
            "ssl.endpoint.identification.algorithm, client.id, request.timeout.ms)"
        )
    return config


# ------------------------------------------------------------------- the Admin API


class AdminAcls:
    """ACLs behind the ACL Admin API of `bootstrap` (DescribeAcls, CreateAcls, DeleteAcls)."""

    def __init__(self, bootstrap: str, command_config: str | Path | None = None) -> None:
        try:
            from kafka.admin import KafkaAdminClient  # type: ignore[import-untyped]
        except ImportError:
            raise AclStoreCliError(
                "--bootstrap-server and --from-cluster need kafka-python: "
                "pip install 'aclgate[admin]'"
            ) from None

        properties = read_properties(command_config) if command_config else {}
        try:
            self.admin = KafkaAdminClient(
                **client_config(bootstrap, properties), request_timeout_ms=30000
            )
        except AclStoreCliError:
            raise
        except Exception as exc:
            raise AclStoreCliError(f"cannot connect to {bootstrap}: {_why(exc)}") from None

    def close(self) -> None:
        self.admin.close()

    def describe(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        found: dict[AclBinding, None] = {}
        for f in filters or (AclBindingFilter.ANY,):
            acls, error = self.admin.describe_acls(_kp_filter(f))
            if error.errno:
                raise AclStoreCliError(_error_text(error))
            found.update(dict.fromkeys(_from_kp(a) for a in acls))
        return list(found)

    def create(self, bindings: Sequence[AclBinding]) -> None:
        if not bindings:
            return
        result = self.admin.create_acls([_kp_acl(b) for b in bindings])
        if result["failed"]:
            raise AclStoreCliError(_error_text(result["failed"][0]))

    def delete(self, filters: Sequence[AclBindingFilter]) -> None:
        if not filters:
            return
        for _, _, error in self.admin.delete_acls([_kp_filter(f) for f in filters]):
            if error.errno:
                raise AclStoreCliError(_error_text(error))


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _error_text(error: Any) -> str:
    """A kafka-python error class as Kafka names the error: `CLUSTER_AUTHORIZATION_FAILED
    (31): Cluster authorization failed.`"""
    name = getattr(error, "message", type(error).__name__)
    return f"{name} ({error.errno}): {getattr(error, 'description', '')}".rstrip(": ")


def _kp_acl(b: AclBinding) -> Any:
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
    )
    from kafka.admin import ResourceType as KpType

    return ACL(
        b.principal,
        b.host,
        ACLOperation(int(b.operation)),
        ACLPermissionType(int(b.permission_type)),
        ResourcePattern(
            KpType(int(b.resource_type)),
            b.resource_name,
            ACLResourcePatternType(int(b.pattern_type)),
        ),
    )


def _kp_filter(f: AclBindingFilter) -> Any:
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpType

    return ACLFilter(
        f.principal,
        f.host,
        ACLOperation(int(f.operation)),
        ACLPermissionType(int(f.permission_type)),
        ResourcePatternFilter(
            KpType(int(f.resource_type)),
            f.resource_name,
            ACLResourcePatternType(int(f.pattern_type)),
        ),
    )


def _from_kp(acl: Any) -> AclBinding:
    pattern = acl.resource_pattern
    return AclBinding(
        ResourceType(int(pattern.resource_type)),
        pattern.resource_name,
        PatternType(int(pattern.pattern_type)),
        acl.principal,
        acl.host,
        AclOperation(int(acl.operation)),
        AclPermissionType(int(acl.permission_type)),
    )
