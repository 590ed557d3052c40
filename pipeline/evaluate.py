"""Deciding decision keys on the executors with the real `authz.Authorizer`.

The rules are not re-implemented in SQL: the distinct keys are few compared with the
events, so each partition rebuilds an Authorizer from the broadcast ACL-file text and asks
it, exactly as `aclgate check` would. Python workers are reused, so an Authorizer is built
once per worker and ACL snapshot, not once per task.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aclgate.pipeline.schema import KEY_FIELDS, key_struct_fields, session_groups

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from aclgate.pipeline.acls import AclSnapshot

INVALID_RULE = "INVALID_KEY"


@dataclass(frozen=True)
class Policy:
    """Everything an Authorizer is configured with: the ACL text plus broker settings."""

    acl_text: str
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    #: KIP-1276, opt-in (`--acl-host-cidr`, as `aclgate serve`'s): an ACL host with `/` is a
    #: network that matches the client addresses in it (docs/authz.md, "CIDR hosts")
    cidr_hosts: bool = False

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(self.acl_text.encode())
        settings = (self.super_users, self.allow_everyone_if_no_acl_found, self.cidr_hosts)
        digest.update(repr(settings).encode())
        return digest.hexdigest()


_AUTHORIZERS: dict[str, Any] = {}


def authorizer_for(policy: Policy) -> Any:
    """An `authz.Authorizer` loaded with the policy, cached per Python process."""
    found = _AUTHORIZERS.get(policy.fingerprint)
    if found is None:
        from aclgate.authz.aclfile import parse_acl_file
        from aclgate.authz.authorizer import Authorizer

        found = Authorizer(
            super_users=policy.super_users,
            allow_everyone_if_no_acl_found=policy.allow_everyone_if_no_acl_found,
            cidr_hosts=policy.cidr_hosts,
        )
        found.load(
            parse_acl_file(policy.acl_text, "broadcast ACL snapshot", cidr_hosts=policy.cidr_hosts)
        )
        _AUTHORIZERS.clear()
        _AUTHORIZERS[policy.fingerprint] = found
    return found


def decide(policy: Policy, keys: Iterable[Sequence[Any]]) -> Iterator[tuple]:
    """(key..., decision, rule, acl dict or None) for each KEY_FIELDS key (principal, host,
    operation, resource type, resource name, groups). `groups` are the session's group
    principals (a list, a tuple, or None for none): the authorizer applies their ACLs as the
    proxy did. The key is yielded back as given, so it joins with the keys it came from."""
    from aclgate.authz.model import AclOperation, ResourceType

    authorizer = authorizer_for(policy)
    for principal, host, operation, resource_type, resource_name, groups in keys:
        key = (principal, host, operation, resource_type, resource_name, groups)
        try:
            op = AclOperation[operation]
            rtype = ResourceType[resource_type]
        except KeyError:
            yield (*key, None, INVALID_RULE, None)
            continue
        decision = authorizer.authorize(
            principal, host, op, rtype, resource_name, session_groups(groups)
        )
        acl = decision.acl.to_dict() if decision.acl is not None else None
        yield (*key, "ALLOWED" if decision.allowed else "DENIED", decision.rule, acl)


def _partition(broadcast: Any) -> Any:
    def run(rows: Iterable[Any]) -> Iterator[tuple]:
        return decide(broadcast.value, (tuple(r) for r in rows))  # rows of KEY_FIELDS

    return run


def evaluated_schema() -> Any:
    from pyspark.sql.types import StringType, StructField, StructType

    from aclgate.pipeline.schema import acl_struct_type

    return StructType(
        [
            *key_struct_fields(),
            StructField("candidate_decision", StringType()),
            StructField("candidate_rule", StringType()),
            StructField("candidate_acl", acl_struct_type()),
        ]
    )


def evaluate_keys(spark: SparkSession, keys: DataFrame, policy: Policy) -> DataFrame:
    """Candidate decision, rule and deciding ACL of every distinct key in `keys`."""
    from aclgate.pipeline.spark import ship_packages

    ship_packages(spark)
    broadcast = spark.sparkContext.broadcast(policy)
    distinct = keys.select(*KEY_FIELDS).distinct()
    rdd = distinct.rdd.mapPartitions(_partition(broadcast))
    return spark.createDataFrame(rdd, evaluated_schema())


def policy_from(
    acls: AclSnapshot,
    super_users: Sequence[str] = (),
    allow_everyone: bool = False,
    cidr_hosts: bool = False,
) -> Policy:
    return Policy(acls.text, tuple(super_users), allow_everyone, cidr_hosts)
