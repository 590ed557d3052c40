"""Where every authorization decision goes: the audit log, the authorizer log line, metrics."""

from __future__ import annotations

import logging

from authz.decision import Decision
from authz.model import AclOperation, ResourceType
from protocol.enforce.context import AuthContext
from protocol.header import RequestHeader
from protocol.versions import api_name
from proxy.audit import AuditLog
from proxy.logs import log_safe

#: Kafka logs its decisions on kafka.authorizer.logger; ours has a name of its own
authorizer_log = logging.getLogger("aclgate.authorizer")

_TYPE_TEXT = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}


def kafka_log_line(
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    api: str,
    ref_count: int,
    decision: Decision,
) -> str:
    """StandardAuthorizer's audit line (authorization.md §8.1), word for word, except that
    control characters are escaped: the resource name and the principal come from the client,
    and a topic name with a newline must not forge a second line."""
    verdict = "Allowed" if decision.allowed else "Denied"
    return log_safe(
        f"Principal = {principal} is {verdict} operation = {operation.name} from host = {host} "
        f"on resource = {_TYPE_TEXT[resource_type]}:LITERAL:{name} for request = {api} "
        f"with resourceRefCount = {ref_count} based on rule {decision.kafka_rule()}"
    )


class DecisionRecorder:
    """The DecisionSink of a running proxy."""

    def __init__(self, counts: dict[tuple, int], audit: AuditLog | None):
        self.audit = audit
        #: exported by proxy.metrics.HotCounters
        self.counts = counts

    def decided(
        self,
        ctx: AuthContext,
        header: RequestHeader,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
        decision: Decision,
        enforced: bool,
        log_if_denied: bool,
        ref_count: int,
    ) -> None:
        key = (header.api_key, operation, resource_type, decision.allowed, enforced)
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1
        # Kafka's levels (authorization.md §8.3): allowed at DEBUG, denied at INFO if logIfDenied
        level = logging.DEBUG if decision.allowed else (logging.INFO if log_if_denied else 0)
        if level and authorizer_log.isEnabledFor(level):
            line = kafka_log_line(
                ctx.principal,
                ctx.host,
                operation,
                resource_type,
                resource_name,
                api_name(header.api_key),
                ref_count,
                decision,
            )
            authorizer_log.log(level, line if enforced else line + " (dry-run: not enforced)")
        if self.audit is not None and (decision.allowed or log_if_denied):
            self.audit.record(
                ctx.listener,
                ctx.principal,
                ctx.host,
                header.client_id,
                api_name(header.api_key),
                header.api_key,
                header.api_version,
                operation.name,
                resource_type.name,
                resource_name,
                decision,
                enforced,
            )
