"""Every ACL that decides a request, not only the one the audit names.

Under Kafka's rules a request matched by several ACLs of the deciding kind (several ALLOWs and
no DENY, or several DENYs) is decided by any of them; the authorizer names one. To tell an ACL
that decides nothing from one that is merely shadowed, each distinct request is asked again
with the named ACL taken out, until the verdict changes or no ACL decides it: the ACLs named
along the way are its deciders, first the one the proxy names. Keys are asked with the real
`authz.Authorizer` on the executors, grouped by the ACL taken out, so the policy is changed once
per distinct chain of deciders, not once per request.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from aclgate.pipeline.schema import KEY_FIELDS, key_struct_fields, session_groups

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from aclgate.authz.authorizer import Authorizer
    from aclgate.authz.model import AclBinding
    from aclgate.pipeline.evaluate import Policy

#: KEY_FIELDS, hashable: `groups` (the session's group principals) as a tuple
Key = tuple[str, str, str, str, str, tuple[str, ...]]


def _ask(authorizer: Authorizer, key: Key) -> Any:
    from aclgate.authz.model import AclOperation, ResourceType

    principal, host, operation, resource_type, resource_name, groups = key
    return authorizer.authorize(
        principal,
        host,
        AclOperation[operation],
        ResourceType[resource_type],
        resource_name,
        session_groups(groups),
    )


def deciders(authorizer: Authorizer, keys: Iterable[Key]) -> dict[Key, list[AclBinding]]:
    """Each valid key's deciding ACLs in the order the authorizer names them ([] when no ACL
    decides it: super user, default). The authorizer is changed and restored before return."""
    from aclgate.authz.model import AclOperation, ResourceType

    found: dict[Key, list[AclBinding]] = {}
    verdict: dict[Key, bool] = {}
    first: list[Key] = []
    for key in keys:
        if key[2] not in AclOperation.__members__ or key[3] not in ResourceType.__members__:
            continue
        found[key] = []
        verdict[key] = _ask(authorizer, key).allowed
        first.append(key)

    def walk(group: Sequence[Key]) -> None:
        by_acl: dict[AclBinding, list[Key]] = defaultdict(list)
        for key in group:
            d = _ask(authorizer, key)
            if d.acl is not None and d.allowed == verdict[key]:
                found[key].append(d.acl)
                by_acl[d.acl].append(key)
        for acl, sub in by_acl.items():
            authorizer.update(remove=[acl])
            try:
                walk(sub)
            finally:
                authorizer.update(add=[acl])

    walk(first)
    return found


def _partition(broadcast: Any) -> Any:
    def run(rows: Iterable[Any]) -> Iterator[tuple]:
        from aclgate.pipeline.evaluate import authorizer_for

        keys = [(r[0], r[1], r[2], r[3], r[4], tuple(r[5] or ())) for r in rows]  # KEY_FIELDS
        found = deciders(authorizer_for(broadcast.value), keys)
        for key, acls in found.items():
            yield (*key[:5], list(key[5]), [a.to_dict() for a in acls])

    return run


def deciders_table(spark: SparkSession, keys: DataFrame, policy: Policy) -> DataFrame:
    """KEY_FIELDS + `deciders` (array of ACL structs) for every distinct valid key."""
    from pyspark.sql.types import ArrayType, StructField, StructType

    from aclgate.pipeline.schema import acl_struct_type
    from aclgate.pipeline.spark import ship_packages

    ship_packages(spark)
    broadcast = spark.sparkContext.broadcast(policy)
    schema = StructType(
        [
            *key_struct_fields(),
            StructField("deciders", ArrayType(acl_struct_type()), nullable=False),
        ]
    )
    rdd = keys.select(*KEY_FIELDS).distinct().rdd.mapPartitions(_partition(broadcast))
    return spark.createDataFrame(rdd, schema)
