"""Where `aclgate acls` reads and changes ACLs: an ACL file, or any Kafka-protocol endpoint
serving the ACL Admin API (an aclgate proxy, whatever its store, or a Kafka cluster).

Both offer the same three calls the command needs: `describe(filters)`, `create(bindings)`,
`delete(filters)`. The Admin API side speaks through kafka-python's KafkaAdminClient (its ACL
enums carry Kafka's codes, every resource type included), configured from a Java client
properties file as kafka-acls' `--command-config` is (`client_config`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from aclgate.authz.model import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from aclgate.proxy.aclstore.filewatch import AclFileStore
from aclgate.proxy.cli.errors import kafka_error_text

if TYPE_CHECKING:
    from aclgate.proxy.aclstore.kafka.store import KafkaAclBackend, KafkaStoreSettings

T = TypeVar("T")


class AclStoreCliError(Exception):
    """The store could not be read or changed; the message says why."""


class AclStoreClient(Protocol):
    def describe(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """The ACLs matching any of `filters` (every ACL when there is none)."""

    def create(self, bindings: Sequence[AclBinding]) -> None: ...

    def delete(self, filters: Sequence[AclBindingFilter]) -> None: ...

    def close(self) -> None: ...


def matching(
    bindings: Sequence[AclBinding], filters: Sequence[AclBindingFilter]
) -> list[AclBinding]:
    """The ACLs any of `filters` matches; all of them when there is no filter (DescribeAcls)."""
    return (
        [b for b in bindings if any(f.matches(b) for f in filters)] if filters else list(bindings)
    )


class FileAcls:
    """An ACL file (locked read-modify-write: proxy/aclstore/filewatch.py)."""

    def __init__(self, path: str | Path, cidr_hosts: bool = False) -> None:
        self.store = AclFileStore(path, cidr_hosts)

    def describe(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        return matching(self.store.load(), filters)

    def create(self, bindings: Sequence[AclBinding]) -> None:
        self.store.modify(lambda current: current + list(bindings), create=True)

    def delete(self, filters: Sequence[AclBindingFilter]) -> None:
        self.store.modify(lambda cur: [b for b in cur if not any(f.matches(b) for f in filters)])

    def close(self) -> None:
        """Nothing is held open between calls."""


class KafkaStoreAcls:
    """The `kafka` ACL store's topic itself, read and written exactly as an instance of the
    fleet does (proxy/aclstore/kafka/store.py): replayed to its end before the first call, every
    change one transaction, a call returns once its change is committed and read back. No
    proxy needs to run: this is how an operator seeds or migrates a fleet's store."""

    def __init__(self, settings: KafkaStoreSettings) -> None:
        self.settings = settings
        self._runner = asyncio.Runner()
        self._backend: KafkaAclBackend | None = None

    def _loaded(self) -> KafkaAclBackend:
        if self._backend is None:
            from aclgate.authz.authorizer import Authorizer
            from aclgate.proxy.aclstore.kafka.store import KafkaAclBackend

            backend = KafkaAclBackend(
                self.settings, Authorizer(cidr_hosts=self.settings.cidr_hosts)
            )
            self._call(backend.start())
            self._backend = backend
        return self._backend

    def _call(self, step: Coroutine[Any, Any, T]) -> T:
        from aclgate.proxy.aclstore.backend import AclStoreError

        try:
            return self._runner.run(step)
        except AclStoreError as exc:
            raise AclStoreCliError(str(exc)) from None

    def describe(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        return matching(self._loaded().authorizer.acls(), filters)

    def create(self, bindings: Sequence[AclBinding]) -> None:
        if bindings:
            self._call(self._loaded().change(bindings, []))

    def delete(self, filters: Sequence[AclBindingFilter]) -> None:
        matched = self.describe(filters) if filters else []
        if matched:
            self._call(self._loaded().change([], matched))

    def close(self) -> None:
        try:
            if self._backend is not None:
                self._call(self._backend.stop())
        finally:
            self._runner.close()


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
_SUPPORTED = (
    "security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.type/location, "
    "ssl.endpoint.identification.algorithm, client.id, request.timeout.ms"
)


@dataclass(frozen=True)
class ClientSecurity:
    """What a Java client configuration says about reaching a cluster, read once and rendered
    for whichever client library talks to it (kafka-python for the Admin API, librdkafka for
    the `kafka` ACL store)."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    cafile: str | None = None
    check_hostname: bool = True

    @classmethod
    def from_properties(cls, properties: dict[str, str] | None) -> ClientSecurity:
        """A property this cannot carry over is an error, never silently dropped (fail
        closed)."""
        props = dict(properties or {})
        protocol = props.pop("security.protocol", "PLAINTEXT").upper()
        mechanism = props.pop("sasl.mechanism", "GSSAPI" if "SASL" in protocol else None)
        jaas = props.pop("sasl.jaas.config", None)
        username = password = cafile = None
        if "SASL" in protocol:
            if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
                raise AclStoreCliError(
                    f"sasl.mechanism {mechanism}: aclgate acls speaks PLAIN and SCRAM-SHA-256/512"
                )
            options = dict(_JAAS_OPTION.findall(jaas or ""))
            if "username" not in options or "password" not in options:
                raise AclStoreCliError('sasl.jaas.config must give username="..." password="..."')
            username, password = options["username"], options["password"]
        check_hostname = True
        if "SSL" in protocol:
            store_type = props.pop("ssl.truststore.type", "PEM").upper()
            cafile = props.pop("ssl.truststore.location", None)
            if cafile is not None and store_type != "PEM":
                raise AclStoreCliError("ssl.truststore.type must be PEM (a CA file)")
            check_hostname = bool(props.pop("ssl.endpoint.identification.algorithm", "https"))
        for harmless in ("client.id", "request.timeout.ms"):
            props.pop(harmless, None)
        if props:
            raise AclStoreCliError(
                f"--command-config: cannot use {', '.join(sorted(props))} (supported: {_SUPPORTED})"
            )
        return cls(protocol, mechanism, username, password, cafile, check_hostname)

    def kafka_python(self, bootstrap: str) -> dict[str, Any]:
        """KafkaAdminClient settings."""
        config: dict[str, Any] = {
            "bootstrap_servers": bootstrap.split(","),
            "security_protocol": self.protocol,
        }
        if "SASL" in self.protocol:
            config.update(
                sasl_mechanism=self.mechanism,
                sasl_plain_username=self.username,
                sasl_plain_password=self.password,
            )
        if "SSL" in self.protocol:
            if self.cafile is not None:
                config["ssl_cafile"] = self.cafile
            config["ssl_check_hostname"] = self.check_hostname
        return config

    def librdkafka(self) -> dict[str, str]:
        """librdkafka (confluent-kafka) settings, without bootstrap.servers."""
        config = {"security.protocol": self.protocol.lower()}
        if "SASL" in self.protocol:
            config.update(
                {
                    "sasl.mechanism": str(self.mechanism),
                    "sasl.username": str(self.username),
                    "sasl.password": str(self.password),
                }
            )
        if "SSL" in self.protocol:
            if self.cafile is not None:
                config["ssl.ca.location"] = self.cafile
            config["ssl.endpoint.identification.algorithm"] = (
                "https" if self.check_hostname else "none"
            )
        return config


def client_config(bootstrap: str, properties: dict[str, str] | None = None) -> dict[str, Any]:
    """KafkaAdminClient settings for `bootstrap` and a Java client configuration."""
    return ClientSecurity.from_properties(properties).kafka_python(bootstrap)


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
            acls, error = _admin_call(self.admin.describe_acls, _kp_filter(f))
            if error.errno:
                raise AclStoreCliError(kafka_error_text(error))
            found.update(dict.fromkeys(_from_kp(a) for a in acls))
        return list(found)

    def create(self, bindings: Sequence[AclBinding]) -> None:
        if not bindings:
            return
        result = _admin_call(self.admin.create_acls, [_kp_acl(b) for b in bindings])
        if result["failed"]:
            raise AclStoreCliError(kafka_error_text(result["failed"][0]))

    def delete(self, filters: Sequence[AclBindingFilter]) -> None:
        if not filters:
            return
        for _, _, error in _admin_call(self.admin.delete_acls, [_kp_filter(f) for f in filters]):
            if error.errno:
                raise AclStoreCliError(kafka_error_text(error))


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _admin_call(call: Callable[..., Any], *args: Any) -> Any:
    """One Admin API call; an error the cluster answers with (kafka-python raises some, an
    authorization failure of DescribeAcls among them, and returns others) is the command's
    one-line error, as the answers it returns are."""
    from kafka.errors import KafkaError  # type: ignore[import-untyped]

    try:
        return call(*args)
    except KafkaError as exc:
        raise AclStoreCliError(kafka_error_text(exc)) from None


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
