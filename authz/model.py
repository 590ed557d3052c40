"""Kafka's ACL data model: enumerations with their wire codes, bindings, filters, validation.

Names and codes follow `org.apache.kafka.common.acl` / `...common.resource` so that ACLs copied
from a broker mean the same thing here (docs/authz.md: its links to Kafka's sources, and
"Managing ACLs").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar, TypeVar

from aclgate.authz.cidr import invalid_cidr_message

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Values that only make sense in filters (or not at all) and never in a stored ACL.
FILTER_ONLY_TYPES = frozenset({ResourceType.UNKNOWN, ResourceType.ANY})
CONCRETE_RESOURCE_TYPES = tuple(t for t in ResourceType if t not in FILTER_ONLY_TYPES)
CONCRETE_OPERATIONS = tuple(o for o in AclOperation if o > AclOperation.ANY)

# AclEntry.supportedOperations (docs/authz.md, "Operations per resource type"): used by the CLI
# and authorizedOperations, never by authorize(). Order as in Kafka's source.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}

# What an ALLOW ACL for the key operation also grants (docs/authz.md, "How a decision is made",
# rule 6). DENY ACLs imply nothing.
IMPLIED_BY_ALLOW: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.READ: frozenset({AclOperation.DESCRIBE}),
    AclOperation.WRITE: frozenset({AclOperation.DESCRIBE}),
    AclOperation.DELETE: frozenset({AclOperation.DESCRIBE}),
    AclOperation.ALTER: frozenset({AclOperation.DESCRIBE}),
    AclOperation.ALTER_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS}),
}


# --------------------------------------------------------------------------- names and parsing

E = TypeVar("E", bound=IntEnum)


def pascal_case(name: str) -> str:
    """`DESCRIBE_CONFIGS` -> `DescribeConfigs`, as Kafka's SecurityUtils.toPascalCase."""
    return "".join(part[:1].upper() + part[1:].lower() for part in name.split("_"))


# spelling -> member, per enum: parse_enum's memo, also read directly by AclBinding.from_dict
_PARSED: dict[type, dict[str, IntEnum]] = {
    e: {} for e in (ResourceType, PatternType, AclOperation, AclPermissionType)
}


def parse_enum(enum: type[E], text: str) -> E:
    """Enum member by name, case-insensitively; `DescribeConfigs` is accepted for
    `DESCRIBE_CONFIGS` too, so ACLs written in Kafka's PascalCase (ZK JSON) also load."""
    memo = _PARSED.setdefault(enum, {})
    try:
        return memo[text]  # type: ignore[return-value]
    except (KeyError, TypeError):
        pass
    if not isinstance(text, str):
        raise ValueError(f"expected a string, got {text!r}")
    key = text.strip().upper()
    member = enum.__members__.get(key)
    if member is None and "_" not in key:
        member = next((m for n, m in enum.__members__.items() if n.replace("_", "") == key), None)
    if member is None:
        names = ", ".join(enum.__members__)
        raise ValueError(f"unknown {enum.__name__} {text!r} (expected one of {names})")
    memo[text] = member
    return member


def _cli_table(enum: type[E]) -> dict[str, E]:
    table: dict[str, E] = {}
    for member in enum:
        pascal = pascal_case(member.name)
        table[pascal] = member
        table[pascal.upper()] = member
    return table


_CLI_OPERATIONS = _cli_table(AclOperation)


def parse_operation_cli(text: str) -> AclOperation:
    """Kafka's `SecurityUtils.operation`: `Read`, `READ`, `DescribeConfigs`, `describeconfigs`
    parse; anything else (including `Describe_Configs`) is UNKNOWN, which the CLI later rejects."""
    return _CLI_OPERATIONS.get(text) or _CLI_OPERATIONS.get(text.upper(), AclOperation.UNKNOWN)


def operation_name(operation: AclOperation) -> str:
    """Kafka's `SecurityUtils.operationName` (PascalCase), as the CLI prints it."""
    return pascal_case(operation.name)


PRINCIPAL_FORMAT_ERROR = "expected a string in format principalType:principalName but got "


def parse_principal(text: str) -> tuple[str, str]:
    """(type, name), split at the first `:` like `SecurityUtils.parseKafkaPrincipal`."""
    kind, sep, name = (text or "").partition(":")
    if not sep:
        raise ValueError(PRINCIPAL_FORMAT_ERROR + str(text))
    return kind, name


# --------------------------------------------------------------------------- bindings


class InvalidAclError(ValueError):
    """A binding or filter Kafka would refuse; `field` names the offending ACL-file field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


# Field name in the ACL file -> (attribute, enum or None for strings).
FIELDS: dict[str, type[IntEnum] | None] = {
    "resource_type": ResourceType,
    "resource_name": None,
    "pattern_type": PatternType,
    "principal": None,
    "host": None,
    "operation": AclOperation,
    "permission_type": AclPermissionType,
}
_FIELD_NAMES = frozenset(FIELDS)


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: `principal` is `permission_type` for `operation` from `host` on a resource pattern."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def to_dict(self) -> dict[str, str]:
        """The ACL-file entry (and audit-event `acl`) shape."""
        return {
            "resource_type": self.resource_type.name,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.name,
            "permission_type": self.permission_type.name,
        }

    @classmethod
    def from_dict(
        cls, data: Any, strings: dict[str, str] | None = None, cidr_hosts: bool = False
    ) -> AclBinding:
        """Parse and validate an ACL-file entry; errors carry the field name. `strings`, when
        given, makes equal names/principals/hosts of many entries share one object;
        `cidr_hosts`: validate a host with `/` as a network (`validate`)."""
        try:  # fast path for well-formed entries in already-seen spellings (a big file)
            if data.keys() == _FIELD_NAMES:
                name, principal, host = data["resource_name"], data["principal"], data["host"]
                if type(name) is str and type(principal) is str and type(host) is str:
                    if strings is not None:
                        name = strings.setdefault(name, name)
                        principal = strings.setdefault(principal, principal)
                        host = strings.setdefault(host, host)
                    binding = cls(
                        _PARSED[ResourceType][data["resource_type"]],  # type: ignore[arg-type]
                        name,
                        _PARSED[PatternType][data["pattern_type"]],  # type: ignore[arg-type]
                        principal,
                        host,
                        _PARSED[AclOperation][data["operation"]],  # type: ignore[arg-type]
                        _PARSED[AclPermissionType][data["permission_type"]],  # type: ignore[arg-type]
                    )
                    binding.validate(cidr_hosts)
                    return binding
        except (AttributeError, KeyError, TypeError):
            pass
        return cls._from_dict_slowly(data, cidr_hosts)

    @classmethod
    def _from_dict_slowly(cls, data: Any, cidr_hosts: bool = False) -> AclBinding:
        """from_dict with a precise error for every way an entry can be wrong."""
        if not isinstance(data, dict):
            raise InvalidAclError("", f"expected an object, got {type(data).__name__}")
        unknown = sorted(set(data) - _FIELD_NAMES)
        if unknown:
            raise InvalidAclError(unknown[0], f"unknown field {unknown[0]!r}")
        values: list[Any] = []  # the fields in order, each a str or its enum as FIELDS says
        for field, enum in FIELDS.items():
            if field not in data:
                raise InvalidAclError(field, "missing field")
            raw = data[field]
            if type(raw) is not str:
                raise InvalidAclError(field, f"expected a string, got {raw!r}")
            try:
                values.append(parse_enum(enum, raw) if enum else raw)
            except ValueError as exc:
                raise InvalidAclError(field, str(exc)) from None
        binding = cls(*values)
        binding.validate(cidr_hosts)
        return binding

    def validate(self, cidr_hosts: bool = False) -> None:
        """Kafka's create-time checks (AclApis, then AclControlManager.validateNewAcl), with
        Kafka's messages, plus the principal format every Kafka tool requires. `cidr_hosts`
        (KIP-1276, opt-in): a host with `/` must be a network (authz/cidr.py); without it a
        host is any string, as in Kafka 4.3.1."""
        if (
            self.resource_name
            and self.resource_type > ResourceType.ANY
            and self.pattern_type >= PatternType.LITERAL
            and self.operation > AclOperation.ANY
            and self.permission_type > AclPermissionType.ANY
            and ":" in self.principal
            and (self.resource_type != ResourceType.CLUSTER or self.resource_name == CLUSTER_NAME)
        ):
            if cidr_hosts and "/" in self.host:
                self._validate_cidr_host()
            return
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise InvalidAclError(
                "resource_name", f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            )
        if self.resource_name == "":
            raise InvalidAclError("resource_name", "Invalid empty resource name")
        if self.resource_type in FILTER_ONLY_TYPES:
            raise InvalidAclError(
                "resource_type", f"Invalid resourceType {self.resource_type.name}"
            )
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError("pattern_type", f"Invalid patternType {self.pattern_type.name}")
        if self.operation <= AclOperation.ANY:
            raise InvalidAclError("operation", f"Invalid operation {self.operation.name}")
        if self.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidAclError(
                "permission_type", f"Invalid permissionType {self.permission_type.name}"
            )
        try:
            parse_principal(self.principal)
        except ValueError as exc:
            raise InvalidAclError("principal", str(exc)) from None

    def _validate_cidr_host(self) -> None:
        """KIP-1276's check, last as in Kafka's validateNewAcl: `Invalid CIDR notation ...`."""
        problem = invalid_cidr_message(self.host)
        if problem is not None:
            raise InvalidAclError("host", problem)

    def to_filter(self) -> AclBindingFilter:
        """The filter that matches exactly this binding."""
        return AclBindingFilter(
            self.resource_type,
            self.resource_name,
            self.pattern_type,
            self.principal,
            self.host,
            self.operation,
            self.permission_type,
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """KIP-290 filter: ANY (or None for strings) matches everything; pattern type MATCH matches
    the ACLs that affect `resource_name` (LITERAL same name, LITERAL `*`, covering PREFIXED)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    ANY: ClassVar[AclBindingFilter]

    def matches_pattern(self, binding: AclBinding) -> bool:
        """`ResourcePatternFilter.matches`."""
        if self.resource_type != ResourceType.ANY and self.resource_type != binding.resource_type:
            return False
        pattern = self.pattern_type
        if pattern not in (PatternType.ANY, PatternType.MATCH) and pattern != binding.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if pattern == PatternType.ANY or pattern == binding.pattern_type:
            return name == binding.resource_name
        if binding.pattern_type == PatternType.LITERAL:
            return name == binding.resource_name or binding.resource_name == WILDCARD
        if binding.pattern_type == PatternType.PREFIXED:
            return name.startswith(binding.resource_name)
        raise ValueError(f"Unsupported PatternType: {binding.pattern_type.name}")

    def matches_entry(self, binding: AclBinding) -> bool:
        """`AccessControlEntryFilter.matches`: exact strings, no implication, no wildcards."""
        return (
            (self.principal is None or self.principal == binding.principal)
            and (self.host is None or self.host == binding.host)
            and (self.operation == AclOperation.ANY or self.operation == binding.operation)
            and (
                self.permission_type == AclPermissionType.ANY
                or self.permission_type == binding.permission_type
            )
        )

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding) and self.matches_entry(binding)

    def validate(self) -> None:
        """`AclControlManager.validateFilter`: UNKNOWN anywhere makes the filter invalid."""
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            raise InvalidAclError("pattern_type", "Unknown patternFilter.")
        if (
            self.operation == AclOperation.UNKNOWN
            or self.permission_type == AclPermissionType.UNKNOWN
        ):
            raise InvalidAclError("operation", "Unknown entryFilter.")


AclBindingFilter.ANY = AclBindingFilter()


# --------------------------------------------------------------------------- Kafka's order


def java_key(text: str) -> str:
    """A sort key that orders like Java's String.compareTo (UTF-16 code units). Code point
    order is the same except for characters beyond the BMP, which become their surrogates."""
    if text.isascii() or max(text) < "\U00010000":
        return text
    units = text.encode("utf-16-be", "surrogatepass")
    return "".join(chr(int.from_bytes(units[i : i + 2], "big")) for i in range(0, len(units), 2))


Matcher = Callable[[AclBindingFilter], list[AclBinding]]
#: per filter the ACLs it matches or why it is invalid, and the union of the matches
FilterMatches = tuple[list[list[AclBinding] | InvalidAclError], list[AclBinding]]


def scan(bindings: Sequence[AclBinding]) -> Matcher:
    """The linear matcher: every binding tested against the filter, in the given order. The
    reference the indexed matcher (Snapshot.matching) is tested against."""
    return lambda f: [b for b in bindings if f.matches(b)]


def match_filters(matching: Matcher, filters: Iterable[AclBindingFilter]) -> FilterMatches:
    """DeleteAcls' matching with KRaft semantics (docs/authz.md, "Managing ACLs"): per filter,
    every ACL `matching` finds for it (even one another filter matched too) or why the filter
    is invalid; and the union of the matches, each once, to remove in one batch."""
    results: list[list[AclBinding] | InvalidAclError] = []
    doomed: dict[AclBinding, None] = {}
    for f in filters:
        try:
            f.validate()
        except InvalidAclError as exc:
            results.append(exc)
            continue
        matched = matching(f)
        doomed.update(dict.fromkeys(matched))
        results.append(matched)
    return results, list(doomed)


def listing_order(bindings: Iterable[AclBinding]) -> list[AclBinding]:
    """StandardAcl.compareTo order, in which KRaft lists ACLs (docs/authz.md, "Which ACL a
    decision names"): type, name descending, pattern, operation, principal, host, permission.
    Sorts the distinct resources, then each resource's few entries, instead of one big sort
    with a composite key."""
    by_resource: dict[tuple[ResourceType, str], list[AclBinding]] = {}
    for b in bindings:
        key = (b.resource_type, b.resource_name)
        found = by_resource.get(key)
        if found is None:
            by_resource[key] = [b]
        else:
            found.append(b)
    resources = sorted(by_resource, key=lambda k: java_key(k[1]), reverse=True)
    resources.sort(key=lambda k: k[0])
    out: list[AclBinding] = []
    for key in resources:
        entries = by_resource[key]
        if len(entries) > 1:
            entries.sort(
                key=lambda b: (
                    b.pattern_type,
                    b.operation,
                    java_key(b.principal),
                    java_key(b.host),
                    b.permission_type,
                )
            )
        out += entries
    return out
