"""The authorization context of one connection: who is asking, and the one place a check is
decided, audited and counted.

Every handler asks `ctx.check(...)`. In enforce mode the answer is the authorizer's decision;
in dry-run mode the decision is still computed, audited (with enforced=false when DENIED) and
counted, but the answer is always "allowed", so the request goes through untouched. The same
holds, in enforce mode, for the principals and resources of the policy's dry-run scope
(protocol/enforce/dryrun.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, NamedTuple, Protocol

from aclgate.authz.authorizer import NO_GROUPS, Authorizer, AuthorizerNotReadyError
from aclgate.authz.decision import Decision
from aclgate.authz.index import held_by
from aclgate.authz.model import CLUSTER_NAME, AclOperation, ResourceType
from aclgate.protocol.enforce.cursor import CursorSeal
from aclgate.protocol.enforce.dryrun import NO_DRY_RUN, DryRunScope
from aclgate.protocol.enforce.protected import PROTECTED, Authorize, guard, is_protected
from aclgate.protocol.enforce.topics import TopicId, TopicIdCache, resolve
from aclgate.protocol.header import RequestHeader

ENFORCE: Final = "enforce"
DRY_RUN: Final = "dry-run"
#: Kafka's "not requested" value for authorized-operations bitfields (Int.MinValue)
NOT_REQUESTED: Final = -2147483648


class DecisionRecord(NamedTuple):
    """One authorization decision, made once where the authorizer answers (`AuthContext`)
    and handed whole to the metrics, the authorizer log, the audit log and dry-run: who asked,
    in which request, for what, and the outcome. A tuple: immutable and cheap to make, as one
    is made for every check of every request."""

    principal: str
    host: str
    listener: str
    #: the session's group principals (`Group:NAME`; docs/authz.md, "Group principals")
    groups: frozenset[str]
    client_id: str | None
    api_key: int
    api_version: int
    operation: AclOperation
    resource_type: ResourceType
    resource_name: str
    #: the authorizer's answer: allowed or not, and the ACL or rule that decided
    outcome: Decision
    #: False: a denial only observed (dry-run mode or scope), the request goes through
    enforced: bool
    #: Kafka's logIfDenied: a denial that is part of a filter is neither logged nor audited
    log_if_denied: bool
    #: Kafka's resourceReferenceCount (0: authorizeByResourceType)
    ref_count: int


_new_record: Final = tuple.__new__


#: (api_key, operation, resource_type, allowed, enforced) -> decisions made
DecisionTally = dict[tuple[int, AclOperation, ResourceType, bool, bool], int]


class DecisionSink(Protocol):
    """Receives every decision: the IO layer writes the audit log, logs and metrics.

    A sink may also have an `allowed_tally` attribute (a DecisionTally, or None): while it is
    not None, an allowed decision needs nothing but its count, and `AuthContext.check` adds it
    there instead of making a DecisionRecord and calling `decided` (proxy/audit/decisions.py
    sets it while neither the audit trail nor the authorizer's DEBUG lines are on). A sink
    without the attribute gets every decision."""

    def decided(self, record: DecisionRecord) -> None: ...


class _NoSink:
    def decided(self, record: DecisionRecord) -> None:
        pass


class NotReady(Exception):
    """The ACL set has not loaded: Kafka answers UNKNOWN_SERVER_ERROR (-1)."""


@dataclass
class ClusterView:
    """What the proxy last saw of the cluster, to answer a Metadata request alone
    (protocol/enforce/metadata.py)."""

    cluster_id: str | None = None
    controller_id: int = -1
    racks: dict[int, str | None] = field(default_factory=dict)

    def seen(self) -> bool:
        return bool(self.racks)


@dataclass
class Policy:
    """What every connection of a listener shares: the authorizer, the mode, the sink."""

    authorizer: Authorizer
    mode: str = ENFORCE
    sink: DecisionSink = field(default_factory=_NoSink)
    #: topic id -> name, shared by every connection to this cluster
    topic_ids: TopicIdCache = field(default_factory=TopicIdCache)
    #: the last view of the cluster, to answer Metadata alone (protocol.enforce.metadata)
    cluster_view: ClusterView = field(default_factory=ClusterView)
    #: seals DescribeTopicPartitions cursors that name hidden topics, under a key the IO layer
    #: makes (protocol/enforce/cursor.py); None: such a cursor fails the connection, never leaks
    cursors: CursorSeal | None = None
    #: an ACL store serves the ACL Admin API (protocol/enforce/acls.py); False: answered as a
    #: broker without an authorizer answers (SECURITY_DISABLED)
    acl_admin: bool = False
    #: topics aclgate keeps for itself (the ACL store's topic): hidden from and denied to
    #: everyone but super users, whatever the ACLs say (protocol/enforce/protected.py)
    protected_topics: frozenset[str] = frozenset()
    #: the DeleteAcls guard (protocol/enforce/acls.py): a request that would remove every ACL,
    #: or more than this share of them, is refused; None: off, as Kafka has no such guard
    delete_acls_max_share: float | None = None
    #: optional conformance switches; see docs/apis.md
    options: dict[str, object] = field(default_factory=dict)
    #: principals and resources only observed while the rest is enforced; the IO layer
    #: replaces it as a whole when its settings are reloaded
    dry_run: DryRunScope = NO_DRY_RUN

    @property
    def enforcing(self) -> bool:
        return self.mode == ENFORCE

    def enforces_denial(
        self,
        principal: str,
        resource_type: ResourceType,
        name: str,
        groups: frozenset[str] = NO_GROUPS,
    ) -> bool:
        """Whether a denial of this request is enforced, not only audited (a protected
        topic's denial is enforced before this is asked: AuthContext.check)."""
        if self.mode != ENFORCE:
            return False
        scope = self.dry_run
        return not scope or not scope.covers(principal, resource_type, name, groups)


class AuthContext:
    """Per connection. `principal` and `host` come from the connection, never from a request."""

    __slots__ = (
        "_authorize",
        "_sink",
        "client_id",
        "found",
        "groups",
        "host",
        "listener",
        "looked_up",
        "policy",
        "principal",
    )

    def __init__(
        self,
        policy: Policy,
        principal: str,
        host: str,
        listener: str,
        groups: frozenset[str] = NO_GROUPS,
    ):
        self.policy = policy
        self.principal = principal
        #: the session's group principals, `Group:NAME` (docs/identity.md, "Groups"): set
        #: with the principal, from the token, the certificate, the users file or LDAP
        self.groups = groups
        self.host = host
        self.listener = listener
        self.client_id: str | None = None
        #: topic ids already looked up upstream for the request being handled (set only on
        #: the copy a resumed request gets: `with_looked_up`)
        self.looked_up: frozenset[uuid.UUID] = frozenset()
        #: what that lookup found: id -> name
        self.found: Mapping[uuid.UUID, str] = {}
        self._authorize: Authorize = guard(
            policy.authorizer.authorize, policy.protected_topics, policy.authorizer.super_users
        )
        self._sink = policy.sink

    @property
    def enforcing(self) -> bool:
        """Enforce mode and a principal outside the dry-run scope: handlers then rewrite
        answers (authorized operations, partial failures) as Kafka would."""
        policy = self.policy
        # DryRunScope.covers_principal without its own call: this runs on every request
        return policy.mode == ENFORCE and not held_by(
            policy.dry_run.principals, self.principal, self.groups
        )

    def with_looked_up(
        self, ids: frozenset[uuid.UUID], found: Mapping[uuid.UUID, str]
    ) -> AuthContext:
        """This context for a request resumed after its topic ids were looked up (`found`:
        the names the cluster gave): ids still unknown are answered as unknown. A copy, so the
        connection's own context never carries one request's state into the next."""
        copy = AuthContext(self.policy, self.principal, self.host, self.listener, self.groups)
        copy.client_id = self.client_id
        copy.looked_up = ids
        copy.found = found
        return copy

    def topic_names_of(self, ids: Iterable[TopicId]) -> dict[TopicId, str | None]:
        """Names for the topic ids of the request in hand (None: unknown to the cluster)."""
        return resolve(self.policy.topic_ids, self.looked_up, ids, self.found)

    def decide(self, operation: AclOperation, resource_type: ResourceType, name: str) -> Decision:
        try:
            return self._authorize(
                self.principal, self.host, operation, resource_type, name, self.groups
            )
        except AuthorizerNotReadyError as exc:
            raise NotReady(str(exc)) from exc

    def check(
        self,
        header: RequestHeader,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        log_if_denied: bool = True,
        ref_count: int = 1,
    ) -> bool:
        """Decide, report the decision, and answer whether to let it through."""
        try:  # `decide`, inlined: this runs for every resource of every request
            decision = self._authorize(
                self.principal, self.host, operation, resource_type, name, self.groups
            )
        except AuthorizerNotReadyError as exc:
            raise NotReady(str(exc)) from exc
        if decision.allowed:
            # most decisions, and nothing wants them but counted: no record, no sink call
            tally: DecisionTally | None = getattr(self._sink, "allowed_tally", None)
            if tally is not None:
                key = (header.api_key, operation, resource_type, True, True)
                tally[key] = tally.get(key, 0) + 1
                return True
        enforced = (
            decision.allowed
            or decision is PROTECTED  # enforced in every mode (protocol/enforce/protected.py)
            or self.policy.enforces_denial(self.principal, resource_type, name, self.groups)
        )
        self._sink.decided(
            _new_record(  # DecisionRecord(...) without its __new__'s Python frame
                DecisionRecord,
                (
                    self.principal,
                    self.host,
                    self.listener,
                    self.groups,
                    header.client_id,
                    header.api_key,
                    header.api_version,
                    operation,
                    resource_type,
                    name,
                    decision,
                    enforced,
                    log_if_denied,
                    ref_count,
                ),
            )
        )
        return decision.allowed or not enforced

    def record(
        self,
        header: RequestHeader,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        decision: Decision,
        enforced: bool = True,
    ) -> DecisionRecord:
        """The record of a decision made outside `check` (the ACL Admin API's cluster
        check, authorizeByResourceType), to hand to the policy's sink."""
        return DecisionRecord(
            self.principal,
            self.host,
            self.listener,
            self.groups,
            header.client_id,
            header.api_key,
            header.api_version,
            operation,
            resource_type,
            name,
            decision,
            enforced,
            True,
            1,
        )

    def check_cluster(
        self, header: RequestHeader, operation: AclOperation, log_if_denied: bool = True
    ) -> bool:
        return self.check(header, operation, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied)

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """Kafka's bitfield of the operations this principal may perform on the resource."""
        policy = self.policy
        if is_protected(
            policy.protected_topics,
            policy.authorizer.super_users,
            self.principal,
            resource_type,
            name,
            self.groups,
        ):
            return 0
        try:
            return self.policy.authorizer.authorized_operations(
                self.principal, self.host, resource_type, name, self.groups
            )
        except AuthorizerNotReadyError as exc:
            raise NotReady(str(exc)) from exc

    def by_resource_type(
        self, header: RequestHeader, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """KIP-679 `authorizeByResourceType`, used by InitProducerId without a transactional id."""
        try:
            decision = self.policy.authorizer.authorize_by_resource_type(
                self.principal, self.host, operation, resource_type, self.groups
            )
        except AuthorizerNotReadyError as exc:
            raise NotReady(str(exc)) from exc
        enforced = decision.allowed or self.enforcing
        self._sink.decided(
            self.record(header, operation, resource_type, "*", decision, enforced)._replace(
                log_if_denied=False, ref_count=0
            )
        )
        return decision.allowed or not enforced
