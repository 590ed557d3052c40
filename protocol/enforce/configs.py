"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

* DescribeConfigs / AlterConfigs / IncrementalAlterConfigs check each config resource by its
  type (Kafka's ConfigHelper and ControllerApis.authorizeAlterResource). The alter APIs first
  repeat the stateless part of the broker's pre-validation (ConfigAdminManager.preprocess),
  which Kafka runs before any authorization, so invalid resources get INVALID_REQUEST as
  they would from Kafka, whoever asks. Answers keep the request's order, as the broker's
  reassembly does.
* BROKER config values that carry a real broker address (listeners, advertised.listeners,
  ...) are redacted like sensitive configs: the proxy's promise is that clients never learn
  a real broker address, and a listener string cannot be rewritten faithfully (one proxy
  port stands for one listener of one node).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from aclgate.authz.model import CLUSTER_NAME, AclOperation, ResourceType
from aclgate.protocol.addresses import BrokerDirectory
from aclgate.protocol.enforce.base import (
    DENIED_CODE,
    ApiHandler,
    KioBody,
    answer,
    error_body,
    forward,
    merged_response,
    reencode_request,
    splice_marked,
    spliced_answer,
)
from aclgate.protocol.enforce.build import NAME_MARK, NamedEntry, build
from aclgate.protocol.enforce.context import AuthContext
from aclgate.protocol.enforce.messages import DEFAULT_MESSAGES
from aclgate.protocol.enforce.slices import decide_targets
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import RequestHeader
from aclgate.protocol.session import ProxySession, Slot, WithState
from aclgate.protocol.shapes.requests import (
    AlterConfigsRequest,
    AlterConfigsRequestResources,
    DescribeConfigsRequest,
    DescribeConfigsRequestResources,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestResources,
)
from aclgate.protocol.versions import response_module

#: a config resource of a request of the three APIs (the fields read are in every version)
ConfigResource = (
    DescribeConfigsRequestResources
    | AlterConfigsRequestResources
    | IncrementalAlterConfigsRequestResources
)
#: a resource of an AlterConfigs / IncrementalAlterConfigs request, with its configs
AlteredResource = AlterConfigsRequestResources | IncrementalAlterConfigsRequestResources
#: the two alter requests
AlterRequest = AlterConfigsRequest | IncrementalAlterConfigsRequest


if TYPE_CHECKING:  # the shapes that dataclasses.replace changes: kio's frozen dataclasses
    from _typeshed import DataclassInstance

    class ConfigResult(DataclassInstance, Protocol):
        """A resource of an answer of the three APIs."""

        @property
        def resource_type(self) -> int: ...
        @property
        def resource_name(self) -> str: ...

    class ConfigSynonym(DataclassInstance, Protocol):
        @property
        def name(self) -> str: ...
        @property
        def value(self) -> str | None: ...

    class DescribedConfig(ConfigSynonym, Protocol):
        @property
        def synonyms(self) -> Sequence[ConfigSynonym] | None: ...

    class DescribedResource(ConfigResult, Protocol):
        @property
        def configs(self) -> Sequence[DescribedConfig] | None: ...

    class DescribeConfigsAnswer(DataclassInstance, Protocol):
        @property
        def results(self) -> Sequence[DescribedResource]: ...

    class AlterConfigsAnswer(DataclassInstance, Protocol):
        @property
        def responses(self) -> Sequence[ConfigResult]: ...


#: the alter answers decided locally: each request resource's (type, name) in order, and the
#: proxy's answer by position
AlterPlan = tuple[tuple[tuple[int, str], ...], dict[int, KioBody]]

DESCRIBE_CONFIGS, ALTER_CONFIGS = AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
INVALID = ErrorCode.invalid_request

#: ConfigResource.Type ids
TOPIC_CONFIG, BROKER_CONFIG, BROKER_LOGGER, CLIENT_METRICS, GROUP_CONFIG = 2, 4, 8, 16, 32
#: IncrementalAlterConfigs OpType DELETE: the only operation that may carry a null value
OP_DELETE = 1


def config_target(resource_type: int, name: str) -> tuple[ResourceType, str] | None:
    """The ACL resource a config resource is checked on, or None for an unknown type."""
    if resource_type in (BROKER_CONFIG, BROKER_LOGGER, CLIENT_METRICS):
        return CLUSTER, CLUSTER_NAME
    if resource_type == TOPIC_CONFIG:
        return TOPIC, name
    if resource_type == GROUP_CONFIG:
        return GROUP, name
    return None


# ---------------------------------------------------------------------------- DescribeConfigs

#: config names whose value is always a set of addresses
ADDRESS_CONFIGS = frozenset(
    {
        "listeners",
        "advertised.listeners",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
    }
)
_HOST_PORT = re.compile(r":\d{1,5}\b")


def real_addresses(directory: BrokerDirectory | None) -> frozenset[str]:
    """`host:port` (and `[host]:port`) of every upstream node the proxy has seen (the IO
    layer's directory keeps them as `upstream`, node id -> (host, port))."""
    known: Mapping[int, tuple[str, int]] = getattr(directory, "upstream", None) or {}
    out = set()
    for host, port in known.values():
        out.add(f"{host}:{port}")
        out.add(f"[{host}]:{port}")
    return frozenset(out)


def leaks_address(name: str, value: str | None, real: frozenset[str]) -> bool:
    """Whether a BROKER config value may tell the client where a real broker listens."""
    if value is None:
        return False
    if name in ADDRESS_CONFIGS:
        return True
    if (name.endswith(".listeners") or name.startswith("listener.name.")) and _HOST_PORT.search(
        value
    ):
        return True
    return any(address in value for address in real)


def redact_config(entry: DescribedConfig, real: frozenset[str]) -> DescribedConfig:
    """Kafka's sensitive-config shape (null value, synonyms' values null) for address values."""
    synonyms = tuple(entry.synonyms or ())
    if not leaks_address(entry.name, entry.value, real) and not any(
        leaks_address(s.name, s.value, real) for s in synonyms
    ):
        return entry
    return dataclasses.replace(
        entry,
        value=None,
        is_sensitive=True,
        synonyms=tuple(dataclasses.replace(s, value=None) for s in synonyms),
    )


def redact_result(result: DescribedResource, real: frozenset[str]) -> DescribedResource:
    if result.resource_type != BROKER_CONFIG or not result.configs:
        return result
    return dataclasses.replace(
        result, configs=tuple(redact_config(c, real) for c in result.configs)
    )


class DescribeConfigsHandler(ApiHandler):
    """ConfigHelper.handleDescribeConfigsRequest: authorized resources are described, the
    others get {error, default message, empty configs}, appended after them."""

    granularity = "per resource"

    def describe(self) -> str:
        return (
            "per resource: BROKER, BROKER_LOGGER, CLIENT_METRICS `DESCRIBE_CONFIGS CLUSTER` (31); "
            "TOPIC `DESCRIBE_CONFIGS TOPIC[resource_name]` (29); GROUP `DESCRIBE_CONFIGS "
            "GROUP[resource_name]` (30); denied: empty config list; an unknown resource type: "
            "every resource 42"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: DescribeConfigsRequest,
    ) -> None:
        mod = response_module(header.api_key, header.api_version)
        targets: list[tuple[ResourceType, str]] = []
        invalid = False
        for resource in request.resources:
            target = config_target(resource.resource_type, resource.resource_name)
            if target is None:  # Kafka throws InvalidRequestException: the whole request fails
                invalid = True  # after authorizing the resources before this one (audited)
                break
            targets.append(target)

        def then(verdicts: list[bool]) -> None:
            if invalid:
                self._invalid(session, ctx, header, frame, request, mod)
            else:
                self._decided(session, header, frame, request, targets, verdicts)

        decide_targets(session, ctx, header, DESCRIBE_CONFIGS, targets, True, then)

    def _invalid(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: DescribeConfigsRequest,
        mod: ModuleType,
    ) -> None:
        if ctx.enforcing:  # every resource 42, rendered as bytes (issue 20)
            invalid = [(r, INVALID) for r in request.resources]
            session.respond(header, _all_denied(header, request, mod, invalid))
        else:  # dry-run: untouched, the broker answers the same
            forward(session, header, frame)

    def _decided(
        self,
        session: ProxySession,
        header: RequestHeader,
        frame: Frame,
        request: DescribeConfigsRequest,
        targets: list[tuple[ResourceType, str]],
        verdicts: list[bool],
    ) -> None:
        mod = response_module(header.api_key, header.api_version)
        allowed: list[ConfigResource] = []
        denied: list[tuple[ConfigResource, ErrorCode]] = []
        for resource, target, ok in zip(request.resources, targets, verdicts, strict=True):
            if ok:
                allowed.append(resource)
            else:
                denied.append((resource, DENIED_CODE[target[0]]))
        if denied and not allowed:
            session.respond(header, _all_denied(header, request, mod, denied))
            return
        redact = any(r.resource_type == BROKER_CONFIG for r in allowed)
        body: Frame = frame
        if denied:
            body = reencode_request(
                frame, header, dataclasses.replace(request, resources=tuple(allowed))
            )
        if not denied and not redact:
            forward(session, header, body)
            return
        spliced = _rendered(mod, denied) if denied else None
        forward(session, header, body, WithState(_describe_configs_answer, spliced))


def _all_denied(
    header: RequestHeader,
    request: DescribeConfigsRequest,
    mod: ModuleType,
    denied: Sequence[tuple[ConfigResource, ErrorCode]],
) -> bytes:
    """The answer to a request whose every resource is denied, its results rendered as bytes
    from one per resource type and code (`NamedEntry`), not built one by one (issue 20)."""
    marked, items, count = _rendered(mod, denied)
    one = error_body(header, request, ErrorCode.none, results=(marked,))
    return spliced_answer(header.correlation_id, one, marked, count, items)


def _rendered(
    mod: ModuleType, denied: Sequence[tuple[ConfigResource, ErrorCode]]
) -> tuple[KioBody, bytes, int]:
    """(one marked result, the encoded results of `denied`, their count), from one template
    per resource type and code."""
    templates: dict[tuple[int, ErrorCode], tuple[KioBody, NamedEntry]] = {}
    items: list[bytes] = []
    for resource, code in denied:
        key = (resource.resource_type, code)
        found = templates.get(key)
        if found is None:
            mark = dataclasses.replace(resource, resource_name=NAME_MARK)
            marked = _describe_error(mod, mark, code)
            found = templates[key] = (marked, NamedEntry(marked))
        items.append(found[1].render(resource.resource_name))
    return next(iter(templates.values()))[0], b"".join(items), len(items)


def _describe_error(mod: ModuleType, resource: ConfigResource, code: ErrorCode) -> KioBody:
    """{error, its default message, type, name, no configs}, as ConfigHelper answers it."""
    return build(
        mod.DescribeConfigsResult,
        code,
        resource,
        None,
        {"error_message": DEFAULT_MESSAGES[int(code)], "configs": ()},
    )


def _describe_configs_answer(
    session: ProxySession, slot: Slot, frame: Frame, denied: tuple[KioBody, bytes, int] | None
) -> bytes:
    """The broker's results, broker configs redacted, then the denied resources' results
    (one marked result in the answer, replaced by the rendered ones)."""
    real = real_addresses(session.config.directory)

    def merge(body: DescribeConfigsAnswer) -> DescribeConfigsAnswer:
        results = tuple(redact_result(r, real) for r in body.results)
        return dataclasses.replace(body, results=results + ((denied[0],) if denied else ()))

    out = merged_response(frame, slot, merge)
    if denied is None:
        return out
    marked, items, count = denied
    return splice_marked(out, slot, "results", marked, items, count)


# ------------------------------------------------------- AlterConfigs, IncrementalAlterConfigs


@dataclass
class AlterConfigsHandler(ApiHandler):
    """AlterConfigs (legacy) and IncrementalAlterConfigs as a KRaft broker + controller do it:
    pre-validation on the broker, then ALTER_CONFIGS per resource on the controller."""

    incremental: bool = False
    granularity: str = "per resource"

    def describe(self) -> str:
        logger = (
            "BROKER_LOGGER `ALTER_CONFIGS CLUSTER` (31, checked on the broker); "
            if self.incremental
            else "BROKER_LOGGER is an unknown type here (42); "
        )
        return (
            "first the broker's stateless pre-validation, whoever asks: a resource named twice, "
            "duplicate config keys, null values"
            + (" (except DELETE)" if self.incremental else "")
            + ", an unknown resource type: 42; then per resource: BROKER, CLIENT_METRICS "
            "`ALTER_CONFIGS CLUSTER` (31); TOPIC `ALTER_CONFIGS TOPIC[resource_name]` (29); GROUP "
            "`ALTER_CONFIGS GROUP[resource_name]` (30); " + logger + "answers in request order"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: AlterRequest,
    ) -> None:
        mod = response_module(header.api_key, header.api_version)
        resources = tuple(request.resources)
        local = self._prevalidate(mod, resources)
        for i, r in enumerate(resources):
            if i not in local:
                denied = self._denied(ctx, header, mod, r)
                if denied is not None:
                    local[i] = denied
        if not local or not ctx.enforcing:
            forward(session, header, frame)
            return
        kept = tuple(r for i, r in enumerate(resources) if i not in local)
        if not kept:
            ordered = tuple(local[i] for i in range(len(resources)))
            answer(session, header, error_body(header, request, ErrorCode.none, responses=ordered))
            return
        stripped = reencode_request(frame, header, dataclasses.replace(request, resources=kept))
        keys = tuple((int(r.resource_type), r.resource_name) for r in resources)
        plan: AlterPlan = (keys, local)
        forward(session, header, stripped, WithState(_reassemble_alter_configs, plan))

    def _prevalidate(
        self, mod: ModuleType, resources: tuple[AlteredResource, ...]
    ) -> dict[int, KioBody]:
        """Position -> INVALID_REQUEST answer, for the resources the broker rejects before
        any authorization (ConfigAdminManager.preprocess)."""
        local: dict[int, KioBody] = {}
        positions: dict[tuple[int, str], list[int]] = {}
        for i, r in enumerate(resources):
            positions.setdefault((int(r.resource_type), r.resource_name), []).append(i)
        for idxs in positions.values():
            if len(idxs) > 1:
                for i in idxs:
                    local[i] = _alter_result(
                        mod, resources[i], INVALID, "Each resource must appear at most once."
                    )
        for i, r in enumerate(resources):
            problem = None if i in local else self._invalid(r)
            if problem is not None:
                local[i] = _alter_result(mod, r, INVALID, problem)
        return local

    @staticmethod
    def _denied(
        ctx: AuthContext, header: RequestHeader, mod: ModuleType, resource: ConfigResource
    ) -> KioBody | None:
        """The answer to a resource the principal may not alter, or None when allowed."""
        target = config_target(resource.resource_type, resource.resource_name)
        if target is None:  # never: _prevalidate answers unknown types first
            raise ValueError(f"unknown config resource type {resource.resource_type}")
        if ctx.check(header, ALTER_CONFIGS, *target):
            return None
        code = DENIED_CODE[target[0]]
        # BROKER_LOGGER fails on the broker with the default message, which
        # ApiError.fromThrowable drops; the controller's ApiError(error) keeps it
        message = None if resource.resource_type == BROKER_LOGGER else DEFAULT_MESSAGES[int(code)]
        return _alter_result(mod, resource, code, message)

    def _invalid(self, resource: AlteredResource) -> str | None:
        """ConfigAdminManager.preprocess's checks that need no broker state, in its order."""
        names = [c.name for c in resource.configs]
        if len(set(names)) != len(names):
            return "Error due to duplicate config keys"
        nulls = [
            c.name
            for c in resource.configs
            if c.value is None
            and not (self.incremental and getattr(c, "config_operation", None) == OP_DELETE)
        ]
        if nulls:
            return "Null value not supported for : " + ", ".join(nulls)
        known = (TOPIC_CONFIG, BROKER_CONFIG, CLIENT_METRICS, GROUP_CONFIG)
        if resource.resource_type in known or (
            self.incremental and resource.resource_type == BROKER_LOGGER
        ):
            return None
        return f"Unknown resource type {int(resource.resource_type)}"


def _alter_result(
    mod: ModuleType, resource: ConfigResource, code: ErrorCode, message: str | None
) -> KioBody:
    return build(mod.AlterConfigsResourceResponse, code, resource, None, {"error_message": message})


def _reassemble_alter_configs(
    session: ProxySession, slot: Slot, frame: Frame, parts: AlterPlan
) -> bytes:
    """ConfigAdminManager.reassemble*Response: one answer per request resource, in order."""
    keys, local = parts
    mod = response_module(slot.api_key, slot.api_version)

    def merge(body: AlterConfigsAnswer) -> AlterConfigsAnswer:
        upstream = {(int(r.resource_type), r.resource_name): r for r in body.responses}
        out: list[KioBody] = []
        for i, key in enumerate(keys):
            if i in local:
                out.append(local[i])
            elif key in upstream:
                out.append(upstream[key])
            else:  # Kafka: "The controller returned fewer results than we expected"
                out.append(
                    build(
                        mod.AlterConfigsResourceResponse,
                        ErrorCode.unknown_server_error,
                        None,
                        None,
                        {"resource_type": key[0], "resource_name": key[1], "error_message": None},
                    )
                )
        return dataclasses.replace(body, responses=tuple(out))

    return merged_response(frame, slot, merge)


__all__ = ["AlterConfigsHandler", "DescribeConfigsHandler", "config_target"]
