"""Kafka's `toString()` forms, so CLI output and audit rules read exactly as Kafka's do."""

from __future__ import annotations

from aclgate.authz.model import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)


def _or_any(value: str | None) -> str:
    return "<any>" if value is None else value


def resource_pattern(rtype: ResourceType, name: str | None, pattern: PatternType) -> str:
    """`ResourcePattern.toString` (and `ResourcePatternFilter.toString`, which is identical)."""
    return f"ResourcePattern(resourceType={rtype.name}, name={_or_any(name)}, patternType={pattern.name})"


def access_control_entry(
    principal: str | None, host: str | None, operation: AclOperation, permission: AclPermissionType
) -> str:
    """`AccessControlEntry.toString`."""
    return (
        f"(principal={_or_any(principal)}, host={_or_any(host)}, "
        f"operation={operation.name}, permissionType={permission.name})"
    )


def binding_pattern(binding: AclBinding) -> str:
    return resource_pattern(binding.resource_type, binding.resource_name, binding.pattern_type)


def binding_entry(binding: AclBinding) -> str:
    return access_control_entry(
        binding.principal, binding.host, binding.operation, binding.permission_type
    )


def standard_acl(binding: AclBinding) -> str:
    """`StandardAcl.toString`, the form inside KRaft's `MatchingAcl(acl=...)` audit rule."""
    b = binding
    return (
        f"StandardAcl(resourceType={b.resource_type.name}, resourceName={b.resource_name}, "
        f"patternType={b.pattern_type.name}, principal={b.principal}, host={b.host}, "
        f"operation={b.operation.name}, permissionType={b.permission_type.name})"
    )
