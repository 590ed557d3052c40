"""`--acl-host-cidr` in the jobs that replay decisions (whatif, report): KIP-1276's CIDR hosts,
opt-in as in `aclgate serve` and `aclgate check`, so a what-if decides as the proxy would.
Without Spark: the executors' decide function, the ACL loading, the removal plan and the
options the commands build."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from aclgate.pipeline.acls import AclLoadError, load_acls
from aclgate.pipeline.advisor import Key, removals
from aclgate.pipeline.evaluate import Policy, decide
from aclgate.pipeline.schema import acl_entry
from aclgate.pipeline.whatif import policy_header
from aclgate.proxy.cli import main
from tests.pipeline.helpers import check_decisions, write_acl_file

OFFICE = acl_entry("TOPIC", "orders", "User:alice", "READ", host="10.1.0.0/16")
INSIDE = ("User:alice", "10.1.2.3", "READ", "TOPIC", "orders")
OUTSIDE = ("User:alice", "10.2.0.1", "READ", "TOPIC", "orders")


def _decisions(acls_path, cidr: bool) -> dict[tuple, str | None]:
    policy = Policy(load_acls(str(acls_path), cidr).text, cidr_hosts=cidr)
    keys = [(*k, []) for k in (INSIDE, OUTSIDE)]  # a session without groups
    return {tuple(row[:5]): row[6] for row in decide(policy, keys)}


def test_decide_matches_cidr_hosts_only_when_asked_and_as_aclgate_check(tmp_path):
    acls = write_acl_file(tmp_path / "acls.json", [OFFICE])
    assert _decisions(acls, cidr=False) == {INSIDE: "DENIED", OUTSIDE: "DENIED"}  # a string
    assert _decisions(acls, cidr=True) == {INSIDE: "ALLOWED", OUTSIDE: "DENIED"}
    check = check_decisions(acls, [INSIDE, OUTSIDE], "--acl-host-cidr")
    assert {k: v["decision"] for k, v in check.items()} == _decisions(acls, cidr=True)


def test_the_fingerprint_keeps_the_two_authorizers_apart():
    assert Policy("x").fingerprint != Policy("x", cidr_hosts=True).fingerprint


def test_an_invalid_network_is_refused_only_with_cidr_hosts(tmp_path):
    bad = acl_entry("TOPIC", "orders", "User:alice", "READ", host="10.1.0.0/99")
    path = write_acl_file(tmp_path / "acls.json", [bad])
    assert load_acls(str(path)).entries[0]["host"] == "10.1.0.0/99"
    with pytest.raises(AclLoadError, match="CIDR"):
        load_acls(str(path), cidr_hosts=True)


def test_the_removal_plan_decides_with_cidr_hosts():
    """The CIDR ACL decides alice's request only with CIDR hosts: then it is not removable."""
    keys = [Key(*INSIDE)]
    assert removals([OFFICE], keys, [OFFICE]) == [OFFICE]
    assert removals([OFFICE], keys, [OFFICE], cidr_hosts=True) == []


def test_the_summary_says_whether_cidr_hosts_were_on(tmp_path):
    candidate = load_acls(str(write_acl_file(tmp_path / "acls.json", [OFFICE])))
    assert policy_header(candidate, Policy(candidate.text, cidr_hosts=True))["acl_host_cidr"]
    assert not policy_header(candidate, Policy(candidate.text))["acl_host_cidr"]


class _Stop(Exception):
    pass


@pytest.mark.parametrize("job", ["whatif", "report"])
@pytest.mark.parametrize("flag", [True, False])
def test_the_commands_pass_the_flag_to_their_job(job, flag, tmp_path, monkeypatch):
    """`aclgate whatif|report --acl-host-cidr` reach the job's options (Spark not started)."""
    seen: list[Any] = []

    def fake_job(opts: Any, *_: Any) -> Any:
        seen.append(opts)
        raise _Stop

    def fake_run_job(args: argparse.Namespace, name: str, stages: int, body: Any) -> int:
        try:
            body(None, None)
        except _Stop:
            return 0
        raise AssertionError("the job was not called")

    module = __import__(f"aclgate.pipeline.cli.{job}", fromlist=["run_job"])
    monkeypatch.setattr(module, "run_job", fake_run_job)
    if job == "whatif":
        monkeypatch.setattr(
            "aclgate.pipeline.whatif_job.run_whatif", lambda _s, opts, _p: fake_job(opts)
        )
        args = ["whatif", "--candidate-acl-file", "new.json"]
    else:
        monkeypatch.setattr(
            "aclgate.pipeline.report.run_report", lambda _s, opts, _p: fake_job(opts)
        )
        args = ["report", "--acl-file", "acls.json"]
    args += ["--audit", str(tmp_path), "--out", str(tmp_path / "out")]
    assert main(args + (["--acl-host-cidr"] if flag else [])) == 0
    assert seen[0].acl_host_cidr is flag
