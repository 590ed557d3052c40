"""The audit event schema (docs/audit.md, schema_version 1) as Spark types.

Reading with this explicit schema instead of inferring one avoids a full extra scan of the
input and makes a proxy/pipeline mismatch show up as counted malformed lines, not as a
silently different table.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import StructField, StructType

SCHEMA_VERSION = 1

ACL_FIELDS = (
    "resource_type",
    "resource_name",
    "pattern_type",
    "principal",
    "host",
    "operation",
    "permission_type",
)

# The decision key: what an authorizer is asked, in the order `Authorizer.authorize` takes it
# (the session's `groups` last). Distinct keys are what the what-if evaluates. `groups` is the
# canonical array of `key_groups` (never null); the other fields are strings.
KEY_FIELDS = ("principal", "host", "operation", "resource_type", "resource_name", "groups")

# Fields without which a line is not a usable event (besides ts, count, schema_version).
REQUIRED_STRINGS = (
    "principal",
    "host",
    "operation",
    "resource_type",
    "resource_name",
    "decision",
)

DECISIONS = ("ALLOWED", "DENIED")
RULES = ("ACL", "SUPER_USER", "NO_ACL_DEFAULT", "DEFAULT_DENY")
RESOURCE_TYPES = ("TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "DELEGATION_TOKEN", "USER")
OPERATIONS = (
    "ALL",
    "READ",
    "WRITE",
    "CREATE",
    "DELETE",
    "ALTER",
    "DESCRIBE",
    "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
    "CREATE_TOKENS",
    "DESCRIBE_TOKENS",
)

CORRUPT_COLUMN = "_corrupt_record"


def key_groups(groups: Column) -> Column:
    """The session's groups as a decision-key column: the event's `groups` sorted, without
    repeats or null entries, and `[]` (not null) when the line has none or predates the field.

    An array, not a joined string: a group name may hold any character (a token claim, a
    certificate OU), so no separator is safe, and a string the executors split again could
    hand the authorizer other groups than the session had. Spark groups, joins, sorts and
    counts arrays of strings by value, and one canonical form per set of groups makes equal
    sets equal keys. The cardinality it adds is that of the sessions' distinct group sets per
    principal (usually one; at most 256 names of 255 characters each, protocol/identity/
    groups.py). CSV output joins the array with spaces (output.write_csv)."""
    from pyspark.sql import functions as F

    present = F.coalesce(groups, F.array().cast("array<string>"))
    return F.array_sort(F.array_distinct(F.array_compact(present)))


def session_groups(groups: Iterable[str] | None) -> frozenset[str]:
    """A key's `groups` (a list from Spark, a tuple, or None) as `Authorizer.authorize` takes
    them."""
    return frozenset(g for g in groups if g) if groups else frozenset()


def key_struct_fields() -> list[StructField]:
    """KEY_FIELDS as the non-null fields of a table the executors build (evaluate, deciders)."""
    from pyspark.sql.types import ArrayType, StringType, StructField

    return [
        StructField(name, ArrayType(StringType()) if name == "groups" else StringType(), False)
        for name in KEY_FIELDS
    ]


def acl_entry(
    resource_type: str,
    resource_name: str,
    principal: str,
    operation: str,
    pattern_type: str = "LITERAL",
    permission_type: str = "ALLOW",
    host: str = "*",
) -> dict[str, str]:
    """An ACL-file entry (the audit `acl` object) from its parts."""
    return {
        "resource_type": resource_type,
        "resource_name": resource_name,
        "pattern_type": pattern_type,
        "principal": principal,
        "host": host,
        "operation": operation,
        "permission_type": permission_type,
    }


def acl_struct_type() -> StructType:
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType([StructField(name, StringType()) for name in ACL_FIELDS])


def audit_schema(with_corrupt_column: bool = False) -> StructType:
    """The on-disk event: timestamps stay strings here and are parsed (leniently) later."""
    from pyspark.sql.types import (
        ArrayType,
        BooleanType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    fields = [
        StructField("schema_version", IntegerType()),
        # absent on decision lines; other event kinds (`acl_change`) are counted, not read
        StructField("event", StringType()),
        StructField("ts", StringType()),
        StructField("ts_first", StringType()),
        StructField("count", LongType()),
        StructField("proxy", StringType()),
        StructField("listener", StringType()),
        StructField("principal", StringType()),
        # the session's group principals (`Group:NAME`, sorted); absent from older lines: null
        StructField("groups", ArrayType(StringType())),
        StructField("host", StringType()),
        StructField("client_id", StringType()),
        StructField("api", StringType()),
        StructField("api_key", IntegerType()),
        StructField("api_version", IntegerType()),
        StructField("operation", StringType()),
        StructField("resource_type", StringType()),
        StructField("resource_name", StringType()),
        StructField("decision", StringType()),
        StructField("enforced", BooleanType()),
        StructField("rule", StringType()),
        StructField("acl", acl_struct_type()),
    ]
    if with_corrupt_column:
        fields.append(StructField(CORRUPT_COLUMN, StringType()))
    return StructType(fields)
