"""Shorthands for the ported Kafka cases (docs/authz.md, "Tests ported from Kafka"): (Type,
name, Pattern, principal, host, OPERATION, PERMISSION) and `principal@host, OPERATION, Type,
name -> expected`."""

from __future__ import annotations

from collections.abc import Iterable

from aclgate.authz.authorizer import Authorizer
from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

T = ResourceType.TOPIC
G = ResourceType.GROUP
C = ResourceType.CLUSTER
TX = ResourceType.TRANSACTIONAL_ID
DT = ResourceType.DELEGATION_TOKEN
U = ResourceType.USER
LIT = PatternType.LITERAL
PRE = PatternType.PREFIXED
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
Op = AclOperation

LOCAL = "10.20.30.40"  # "the test machine's address": anything but 192.168.1.1 / .2


def acl(
    rtype: ResourceType,
    name: str,
    pattern: PatternType,
    principal: str,
    host: str,
    op: AclOperation,
    perm: AclPermissionType,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def loaded(
    acls: Iterable[AclBinding] = (),
    super_users: Iterable[str] = (),
    allow_everyone: bool = False,
) -> Authorizer:
    authz = Authorizer(super_users=super_users, allow_everyone_if_no_acl_found=allow_everyone)
    authz.load(acls)
    return authz


def decide(authz: Authorizer, who: str, op: AclOperation, rtype: ResourceType, name: str) -> str:
    """`principal@host` query -> "ALLOW" / "DENY" as the catalogue writes it."""
    principal, _, host = who.rpartition("@")
    return "ALLOW" if authz.authorize(principal, host, op, rtype, name).allowed else "DENY"


def abrt(authz: Authorizer, who: str, op: AclOperation, rtype: ResourceType) -> str:
    principal, _, host = who.rpartition("@")
    allowed = authz.authorize_by_resource_type(principal, host, op, rtype).allowed
    return "ALLOW" if allowed else "DENY"
