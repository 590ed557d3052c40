"""The result of one authorization query, with the rule that decided it (docs/audit.md)."""

from __future__ import annotations

from typing import NamedTuple

from aclgate.authz.model import AclBinding
from aclgate.authz.text import standard_acl

RULE_ACL = "ACL"
RULE_SUPER_USER = "SUPER_USER"
RULE_NO_ACL_DEFAULT = "NO_ACL_DEFAULT"
RULE_DEFAULT_DENY = "DEFAULT_DENY"


class Decision(NamedTuple):
    """`allowed` plus the audit `rule` and, for rule `ACL`, the deciding binding."""

    allowed: bool
    rule: str
    acl: AclBinding | None

    @property
    def verdict(self) -> str:
        """`ALLOWED` or `DENIED`, the audit event's `decision` field."""
        return "ALLOWED" if self.allowed else "DENIED"

    def kafka_rule(self) -> str:
        """The rule as StandardAuthorizer's audit line spells it (docs/audit.md, "The authorizer
        log line")."""
        if self.rule == RULE_ACL and self.acl is not None:
            return f"MatchingAcl(acl={standard_acl(self.acl)})"
        if self.rule == RULE_SUPER_USER:
            return "SuperUser"
        if self.rule == RULE_NO_ACL_DEFAULT and self.allowed:
            return "DefaultAllow"
        return "DefaultDeny"


# Decisions that carry no binding are shared, never rebuilt per query.
SUPER_USER = Decision(True, RULE_SUPER_USER, None)
NO_ACL_ALLOW = Decision(True, RULE_NO_ACL_DEFAULT, None)
NO_ACL_DENY = Decision(False, RULE_NO_ACL_DEFAULT, None)
DEFAULT_DENY = Decision(False, RULE_DEFAULT_DENY, None)
