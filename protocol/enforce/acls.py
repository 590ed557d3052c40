"""The ACL Admin API: DescribeAcls, CreateAcls, DeleteAcls, served by aclgate itself.

These requests are never forwarded: forwarded, they would read or change the cluster's ACLs
with the proxy's own identity. They read aclgate's authorizer and change aclgate's ACL store,
as a KRaft broker's AclApis reads its StandardAuthorizer and changes the metadata log:

* authorization first, for the whole request (AuthHelper.authorizeClusterOperation):
  DESCRIBE on CLUSTER for DescribeAcls, ALTER on CLUSTER for Create/DeleteAcls; denied: 31 on
  the request (DescribeAcls) or on every entry (Create/DeleteAcls). Enforced in dry-run mode
  too: the proxy's own policy is not the cluster's to protect;
* no ACL store (no ACL file, no kafka store): 54 SECURITY_DISABLED, as a broker without an
  authorizer answers;
* a request with an UNKNOWN (code 0) type, pattern, operation or permission is one Kafka
  cannot parse: the connection is closed;
* CreateAcls fails as a whole (UNKNOWN_SERVER_ERROR on every entry) when an entry holds a
  filter-only value (ANY, MATCH): Kafka cannot even build its AclBinding. Otherwise it
  validates each binding with Kafka's messages (authz/model.py `validate`; with
  --acl-host-cidr also KIP-1276's `Invalid CIDR notation` for a host with `/`), then
  the valid ones go to the store as one `StoreAclChange`; DeleteAcls validates each filter,
  reports every ACL each filter matches (KRaft: a binding matched by two filters is reported
  by both) and removes their union as one change. The answer is sent once the store has the
  change durable and in force here (read-your-writes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from types import ModuleType
from typing import Any, TypeVar, cast

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32Timedelta

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    FilterMatches,
    InvalidAclError,
    PatternType,
    ResourceType,
)
from aclgate.protocol.codec import encode_response
from aclgate.protocol.effects import (
    AclChangeRefused,
    AclStoreFailure,
    Busy,
    RunBlocking,
    StoreAclChange,
)
from aclgate.protocol.enforce.base import ApiHandler, KioBody, answer
from aclgate.protocol.enforce.context import AuthContext, Policy
from aclgate.protocol.framing import Frame
from aclgate.protocol.header import MalformedRequest, RequestHeader
from aclgate.protocol.session import ProxySession
from aclgate.protocol.shapes.requests import (
    CreateAclsRequest,
    CreateAclsRequestCreations,
    DeleteAclsRequest,
    DescribeAclsRequest,
)
from aclgate.protocol.versions import api_name, response_class, response_module

DESCRIBE, ALTER = AclOperation.DESCRIBE, AclOperation.ALTER
DENIED = ErrorCode.cluster_authorization_failed
#: Kafka's default message of CLUSTER_AUTHORIZATION_FAILED (its own message names internal
#: request details: "Request Request(processor=..., ...) is not authorized.")
DENIED_MESSAGE = "Cluster authorization failed."
#: AclApis' answers without an authorizer
NO_AUTHORIZER_DESCRIBE = "No Authorizer is configured on the broker"
NO_AUTHORIZER = "No Authorizer is configured."
ZERO_THROTTLE = i32Timedelta.parse(timedelta(0))

E = TypeVar("E", ResourceType, PatternType, AclOperation, AclPermissionType)
T = TypeVar("T")


#: a DescribeAcls request or a DeleteAcls filter (v1-3: the same fields; a DeleteAcls filter
#: is one structurally)
AclFilterEntry = DescribeAclsRequest
#: a CreateAcls creation, v1-3
AclCreation = CreateAclsRequestCreations


def from_code(enum: type[E], code: int) -> E:
    """Java's `fromCode`: a code Kafka does not know is UNKNOWN."""
    try:
        return enum(code)
    except ValueError:
        return enum(0)


def _refuse_unknown(codes: Sequence[int], what: str) -> None:
    """The request constructors' check: an UNKNOWN (0) field fails parsing, and Kafka closes
    the connection on a request it cannot parse."""
    if 0 in codes:
        raise MalformedRequest(f"{what} contains UNKNOWN elements")


def _filter(entry: AclFilterEntry) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter as an AclBindingFilter."""
    _refuse_unknown(
        (
            entry.resource_type_filter,
            entry.pattern_type_filter,
            entry.operation,
            entry.permission_type,
        ),
        "the ACL filter",
    )
    return AclBindingFilter(
        from_code(ResourceType, entry.resource_type_filter),
        entry.resource_name_filter,
        from_code(PatternType, entry.pattern_type_filter),
        entry.principal_filter,
        entry.host_filter,
        from_code(AclOperation, entry.operation),
        from_code(AclPermissionType, entry.permission_type),
    )


def _binding(creation: AclCreation) -> AclBinding:
    return AclBinding(
        from_code(ResourceType, creation.resource_type),
        creation.resource_name,
        from_code(PatternType, creation.resource_pattern_type),
        creation.principal,
        creation.host,
        from_code(AclOperation, creation.operation),
        from_code(AclPermissionType, creation.permission_type),
    )


def _in_kafkas_words(exc: InvalidAclError, binding: AclBinding) -> InvalidAclError:
    """The controller's message for a principal without a colon (Kafka 4.x), where the ACL
    file and the CLI say it as SecurityUtils.parseKafkaPrincipal does."""
    if exc.field != "principal":
        return exc
    return InvalidAclError(
        "principal",
        f"Could not parse principal from `{binding.principal}` (no colon is present "
        "separating the principal type from the principal name)",
    )


def _not_a_binding(creation: AclCreation) -> bool:
    """What Kafka's ResourcePattern and AccessControlEntry constructors refuse: the filter-only
    values ANY (resource type, operation, permission) and MATCH/ANY (pattern type)."""
    return (
        creation.resource_type == ResourceType.ANY
        or creation.resource_pattern_type in (PatternType.ANY, PatternType.MATCH)
        or creation.operation == AclOperation.ANY
        or creation.permission_type == AclPermissionType.ANY
    )


def acl_admin_authorized(ctx: AuthContext, header: RequestHeader, operation: AclOperation) -> bool:
    """The cluster check, enforced in every mode (see the module docstring), and reported."""
    decision = ctx.decide(operation, ResourceType.CLUSTER, CLUSTER_NAME)
    ctx.policy.sink.decided(
        ctx.record(header, operation, ResourceType.CLUSTER, CLUSTER_NAME, decision)
    )
    return decision.allowed


def _respond_later(
    session: ProxySession,
    ctx: AuthContext,
    header: RequestHeader,
    change: StoreAclChange,
    build: Callable[..., KioBody],
    args: tuple[Any, ...],
    wide: bool = False,
) -> None:
    """Answer once the store has committed `change` (or failed to). The connection's next
    requests wait meanwhile (a held wait), as a broker reads no further request of a connection
    before it has answered the one in hand: a request pipelined behind a CreateAcls is decided
    with the change in force."""
    session.wait(
        change,
        lambda failure: _answer_built(session, ctx, header, build, (*args, failure), wide),
    )


def _store_error(failure: AclStoreFailure) -> tuple[ErrorCode, str]:
    """UNKNOWN_SERVER_ERROR with a message that names no internals (paths, hosts): the proxy's
    log and the audit event say why, as Kafka keeps a server error's details to itself."""
    return (
        ErrorCode.unknown_server_error,
        "The ACL store did not commit the change; nothing of it was applied (the proxy's log "
        "says why)",
    )


class DescribeAclsHandler(ApiHandler):
    """AclApis.handleDescribeAcls."""

    def describe(self) -> str:
        return (
            "`DESCRIBE CLUSTER` (31 on the request); served from aclgate's own ACLs, never "
            "forwarded; no ACL store: 54 SECURITY_DISABLED"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: AclFilterEntry,
    ) -> None:
        acl_filter = _filter(request)
        cls = response_class(header.api_key, header.api_version)
        if not acl_admin_authorized(ctx, header, DESCRIBE):
            body = cls(
                throttle_time=ZERO_THROTTLE,
                error_code=DENIED,
                error_message=DENIED_MESSAGE,
                resources=(),
            )
        elif not ctx.policy.acl_admin:
            body = cls(
                throttle_time=ZERO_THROTTLE,
                error_code=ErrorCode.security_disabled,
                error_message=NO_AUTHORIZER_DESCRIBE,
                resources=(),
            )
        else:
            mod = response_module(header.api_key, header.api_version)
            args = (cls, mod, ctx.policy.authorizer, acl_filter)
            _answer_built(session, ctx, header, _described, args, _wide([acl_filter]))
            return
        answer(session, header, body)


def _described(
    cls: type, mod: ModuleType, authorizer: Authorizer, acl_filter: AclBindingFilter
) -> KioBody:
    """DescribeAcls' answer: every ACL `acl_filter` matches, grouped by resource pattern."""
    return cls(
        throttle_time=ZERO_THROTTLE,
        error_code=ErrorCode.none,
        error_message="",  # Kafka leaves the field at its default
        resources=_resources(mod, authorizer.acls(acl_filter)),
    )


def _wide(filters: Sequence[AclBindingFilter]) -> bool:
    """A filter without a resource name can match every ACL (210,000: seconds of CPU to
    match, build and encode): such requests are served off the event loop (docs/design.md,
    "ACL filters off the loop")."""
    return any(f.resource_name is None for f in filters)


def _off_loop(
    session: ProxySession,
    ctx: AuthContext,
    header: RequestHeader,
    job: tuple[Callable[..., T], tuple[Any, ...]],
    then: Callable[[T], None],
) -> None:
    """Compute `job` (a function and its arguments) in a worker thread (RunBlocking, fair by
    client address), then `then(its result)` on the loop. An exception it raised is a bug of ours: the connection is closed,
    as for any; the workers' queues full (BUSY): closed too, and the client retries as after
    any network error."""

    def done(result: object) -> None:
        if isinstance(result, BaseException):
            session.internal_error(api_name(header.api_key), result)
        elif isinstance(result, Busy):
            session.fail(
                f"{api_name(header.api_key)} not answered: the workers are busy", "acl_admin_busy"
            )
        else:
            then(cast(T, result))

    session.wait(RunBlocking(*job, source=ctx.host), done)


def _answer_built(
    session: ProxySession,
    ctx: AuthContext,
    header: RequestHeader,
    build: Callable[..., KioBody],
    args: tuple[Any, ...],
    wide: bool,
) -> None:
    """Answer with `build(*args)`; for a wide request, built and encoded off the event loop."""
    if not wide:
        answer(session, header, build(*args))
        return
    _off_loop(
        session,
        ctx,
        header,
        (_encoded, (header.correlation_id, build, args)),
        lambda data: session.respond(header, data),
    )


def _encoded(correlation_id: int, build: Callable[..., KioBody], args: tuple[Any, ...]) -> bytes:
    return encode_response(correlation_id, build(*args))


def _resources(mod: ModuleType, bindings: Sequence[AclBinding]) -> tuple[KioBody, ...]:
    """DescribeAclsResponse.aclsResources: one entry per resource pattern, in the listing
    order `bindings` (Authorizer.acls) come in."""
    grouped: dict[tuple[ResourceType, str, PatternType], list[KioBody]] = {}
    for b in bindings:
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            mod.AclDescription(
                principal=b.principal,
                host=b.host,
                operation=i8(b.operation),
                permission_type=i8(b.permission_type),
            )
        )
    return tuple(
        mod.DescribeAclsResource(
            resource_type=i8(rtype), resource_name=name, pattern_type=i8(ptype), acls=tuple(acls)
        )
        for (rtype, name, ptype), acls in grouped.items()
    )


class CreateAclsHandler(ApiHandler):
    """AclApis.handleCreateAcls, then AclControlManager.createAcls."""

    granularity = "per ACL"

    def describe(self) -> str:
        return (
            "`ALTER CLUSTER` (31 on every creation); each binding validated as Kafka does (42 "
            "with Kafka's message), the valid ones committed to aclgate's ACL store as one "
            "change and in force before the answer; no ACL store: 54 SECURITY_DISABLED"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: CreateAclsRequest,
    ) -> None:
        for creation in request.creations:
            _refuse_unknown(
                (
                    creation.resource_type,
                    creation.resource_pattern_type,
                    creation.operation,
                    creation.permission_type,
                ),
                "the ACL creation",
            )
        mod = response_module(header.api_key, header.api_version)
        cls = response_class(header.api_key, header.api_version)
        count = len(request.creations)
        # ALTER CLUSTER was decided on the header, before decoding (table.py, HeaderCheck)
        if not ctx.policy.acl_admin:
            refused: tuple[ErrorCode, str | None] = (ErrorCode.security_disabled, NO_AUTHORIZER)
            answer(session, header, _creation_results(cls, mod, [refused] * count))
            return
        if any(_not_a_binding(c) for c in request.creations):
            # Kafka builds every AclBinding before it validates any: a filter-only value throws
            # there, and the whole request fails (UNKNOWN_SERVER_ERROR, no message)
            failed: tuple[ErrorCode, str | None] = (ErrorCode.unknown_server_error, None)
            answer(session, header, _creation_results(cls, mod, [failed] * count))
            return
        bindings = [_binding(c) for c in request.creations]
        errors: list[InvalidAclError | None] = []
        valid: list[AclBinding] = []
        # KIP-1276, opt-in: a host with `/` must be a network (Kafka trunk's message); off, a
        # literal string, stored as Kafka 4.3.1 stores it
        cidr_hosts = ctx.policy.authorizer.cidr_hosts
        for b in bindings:
            try:
                b.validate(cidr_hosts)
            except InvalidAclError as exc:
                errors.append(_in_kafkas_words(exc, b))
            else:
                errors.append(None)
                valid.append(b)

        if not valid:
            answer(session, header, _created(cls, mod, errors, None))
            return
        change = StoreAclChange(additions=tuple(dict.fromkeys(valid)))
        _respond_later(session, ctx, header, change, _created, (cls, mod, errors))


def _creation_results(
    cls: type, mod: ModuleType, outcomes: Sequence[tuple[ErrorCode, str | None]]
) -> KioBody:
    return cls(
        throttle_time=ZERO_THROTTLE,
        results=tuple(
            mod.AclCreationResult(error_code=code, error_message=message)
            for code, message in outcomes
        ),
    )


def _created(
    cls: type,
    mod: ModuleType,
    errors: Sequence[InvalidAclError | None],
    failure: AclStoreFailure | None,
) -> KioBody:
    """CreateAcls' answer once the store committed the valid creations (or failed to)."""
    stored = (ErrorCode.none, "") if failure is None else _store_error(failure)
    return _creation_results(
        cls, mod, [stored if e is None else (ErrorCode.invalid_request, e.message) for e in errors]
    )


class DeleteAclsHandler(ApiHandler):
    """AclApis.handleDeleteAcls, then AclControlManager.deleteAcls."""

    granularity = "per filter"

    def describe(self) -> str:
        return (
            "`ALTER CLUSTER` (31 on every filter); each filter validated as Kafka does (42), "
            "every ACL it matches reported (also when another filter matched it too), their "
            "union removed from aclgate's ACL store as one change, in force before the answer; "
            "no ACL store: 54 SECURITY_DISABLED"
        )

    def handle(
        self,
        session: ProxySession,
        ctx: AuthContext,
        header: RequestHeader,
        frame: Frame,
        request: DeleteAclsRequest,
    ) -> None:
        filters = [_filter(f) for f in request.filters]
        mod = response_module(header.api_key, header.api_version)
        cls = response_class(header.api_key, header.api_version)
        # ALTER CLUSTER was decided on the header, before decoding (table.py, HeaderCheck)
        if not ctx.policy.acl_admin:
            outcome = (ErrorCode.security_disabled, NO_AUTHORIZER, ())
            answer(session, header, _filter_results(cls, mod, [outcome] * len(filters)))
            return
        wide = _wide(filters)

        def matched(found: FilterMatches) -> None:
            matches, doomed = found
            refused = guard_refuses(ctx.policy, len(doomed))
            if refused is not None:
                session.notify(AclChangeRefused(tuple(doomed), refused))
                outcome = (ErrorCode.policy_violation, refused, ())
                answer(session, header, _filter_results(cls, mod, [outcome] * len(filters)))
                return
            if not doomed:
                _answer_built(session, ctx, header, _deleted, (cls, mod, matches, None), wide)
                return
            change = StoreAclChange(removals=tuple(doomed))
            _respond_later(session, ctx, header, change, _deleted, (cls, mod, matches), wide)

        match = ctx.policy.authorizer.match_filters
        if wide:
            _off_loop(session, ctx, header, (match, (filters,)), matched)
        else:
            matched(match(filters))


def guard_refuses(policy: Policy, removing: int) -> str | None:
    """Why the DeleteAcls guard refuses to remove `removing` ACLs (every ACL, or more than
    `--delete-acls-max-share` of them), or None. Off unless configured: Kafka has no guard."""
    share = policy.delete_acls_max_share
    total = policy.authorizer.acl_count()
    if share is None or not removing or not total:
        return None
    if removing >= total:
        return (
            f"this request would remove every ACL ({total}); aclgate's DeleteAcls guard "
            "(--delete-acls-max-share) refuses it: remove them with narrower filters"
        )
    if removing > share * total:
        return (
            f"this request would remove {removing} of {total} ACLs, more than the "
            f"{share:g} share aclgate's DeleteAcls guard (--delete-acls-max-share) allows"
        )
    return None


def _filter_results(
    cls: type,
    mod: ModuleType,
    results: Sequence[tuple[ErrorCode, str | None, Sequence[AclBinding]]],
) -> KioBody:
    return cls(
        throttle_time=ZERO_THROTTLE,
        filter_results=tuple(
            mod.DeleteAclsFilterResult(
                error_code=code,
                error_message=message,
                matching_acls=tuple(_matching(mod, b) for b in matched),
            )
            for code, message, matched in results
        ),
    )


def _deleted(
    cls: type,
    mod: ModuleType,
    matches: Sequence[InvalidAclError | Sequence[AclBinding]],
    failure: AclStoreFailure | None,
) -> KioBody:
    """DeleteAcls' answer once the store removed what the filters matched (or failed to)."""
    out: list[tuple[ErrorCode, str | None, Sequence[AclBinding]]] = []
    for m in matches:
        if isinstance(m, InvalidAclError):
            out.append((ErrorCode.invalid_request, m.message, ()))
        elif failure is not None and m:
            out.append((*_store_error(failure), ()))
        else:
            out.append((ErrorCode.none, None, m))
    return _filter_results(cls, mod, out)


def denied_creation(mod: ModuleType) -> KioBody:
    """CreateAcls' result for every creation of a request denied ALTER CLUSTER."""
    return mod.AclCreationResult(error_code=DENIED, error_message=DENIED_MESSAGE)


def denied_filter(mod: ModuleType) -> KioBody:
    """DeleteAcls' result for every filter of a request denied ALTER CLUSTER."""
    return mod.DeleteAclsFilterResult(
        error_code=DENIED, error_message=DENIED_MESSAGE, matching_acls=()
    )


def _matching(mod: ModuleType, b: AclBinding) -> KioBody:
    return mod.DeleteAclsMatchingAcl(
        error_code=ErrorCode.none,
        error_message=None,
        resource_type=i8(b.resource_type),
        resource_name=b.resource_name,
        pattern_type=i8(b.pattern_type),
        principal=b.principal,
        host=b.host,
        operation=i8(b.operation),
        permission_type=i8(b.permission_type),
    )
