"""The `aclgate advise` job: observed traffic (Spark) -> least-privilege ACL file (advisor.py).

Spark reduces the audit to its distinct decision keys; those are few enough to reason about
on the driver, where the proposal is built and checked with `authz/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aclgate.pipeline.advisor import Key, Observations, Proposal, propose
from aclgate.pipeline.jobs import load_audit
from aclgate.pipeline.kafkasource import KafkaInput
from aclgate.pipeline.schema import KEY_FIELDS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from aclgate.pipeline.spark import Progress


@dataclass
class AdviseOptions:
    audit: list[str]
    out: str
    include_dry_run_denials: bool = False
    min_prefix: int = 3
    super_users: list[str] = field(default_factory=list)
    since: datetime | None = None
    until: datetime | None = None
    explain: str | None = None
    kafka: KafkaInput | None = None  # the audit topic, read from earliest to latest offsets


def observations(
    events: DataFrame, include_dry_run_denials: bool, super_users: tuple[str, ...] = ()
) -> tuple[Observations, dict[str, int]]:
    """Which keys must stay allowed, which must stay denied, and every resource seen. A key
    of a super user, or of a session in a group that is one (`--super-user Group:ops`), is
    left out: its requests need no ACLs."""
    from pyspark.sql import functions as F

    from aclgate.authz.index import held_by

    rows = (
        events.groupBy(*KEY_FIELDS, "decision", "enforced")
        .agg(F.sum("count").alias("events"))
        .collect()
    )
    supers = frozenset(super_users)
    obs = Observations()
    dry_run_included = 0
    for row in rows:
        key = Key.of([row[name] for name in KEY_FIELDS])
        obs.seen[key.resource_type].add(key.resource_name)
        if held_by(supers, key.principal, frozenset(key.groups)):
            continue
        if row["decision"] == "ALLOWED":
            obs.allowed.add(key)
        elif include_dry_run_denials and not row["enforced"]:
            obs.allowed.add(key)
            dry_run_included += 1
        else:
            obs.denied.add(key)
    both = obs.settle()  # seen allowed at some time (with any groups): it stays allowed
    stats = {
        "allowed_keys": len(obs.allowed),
        "denied_keys": len(obs.denied),
        "dry_run_denied_keys_included": dry_run_included,
        "keys_both_allowed_and_denied": both,
    }
    return obs, stats


def write_acl_file(proposal: Proposal, out: Path) -> None:
    from aclgate.authz.aclfile import dump_acl_file
    from aclgate.authz.model import AclBinding

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dump_acl_file(AclBinding.from_dict(a) for a in proposal.acls))


def run_advise(spark: SparkSession, opts: AdviseOptions, progress: Progress) -> dict[str, Any]:
    import json

    out = Path(opts.out).expanduser()
    loaded = load_audit(spark, opts.audit, progress, opts.since, opts.until, kafka=opts.kafka)
    try:
        progress.step("collecting distinct requests")
        obs, stats = observations(
            loaded.data.events, opts.include_dry_run_denials, tuple(opts.super_users)
        )
    finally:
        loaded.data.release()
    progress.step(f"proposing ACLs for {stats['allowed_keys']:,} allowed request shapes")
    proposal = propose(obs, opts.min_prefix, tuple(opts.super_users))
    write_acl_file(proposal, out)
    prefixed = sum(1 for a in proposal.acls if a["pattern_type"] == "PREFIXED")
    summary = {
        "tool": "aclgate advise",
        "acl_file": str(out),
        "inputs": loaded.summary,
        **stats,
        "acls": len(proposal.acls),
        "prefixed_acls": prefixed,
        "refinement_passes": proposal.iterations,
        "conflicts": proposal.conflicts,
        "principals": proposal.shapes,
    }
    if opts.explain:
        Path(opts.explain).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary
