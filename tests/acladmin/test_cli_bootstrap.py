"""`aclgate acls --bootstrap-server` against an aclgate proxy and against Apache Kafka: the same
steps print the same as kafka-acls does, and leave the same ACLs; `aclgate acls import
--from-cluster` copies a cluster's ACLs into an ACL file; `aclgate acls export` writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aclgate.authz.aclfile import parse_acl_file
from tests.acladmin.conftest import Side
from tests.acladmin.test_kafka_acls_tool import normalized
from tests.authz.cli import aclgate, run
from tests.kafka import tools
from tests.kafka.cluster import write_properties

pytestmark = pytest.mark.kafka

STEPS: list[tuple[str, ...]] = [
    ("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders",
     "--group", "billing"),
    ("--add", "--producer", "--idempotent", "--allow-principal", "User:bob", "--topic", "pay-",
     "--resource-pattern-type", "prefixed"),
    ("--add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.9", "--operation", "Read",
     "--topic", "*"),
    ("--list",),
    ("--list", "--topic", "pay-x", "--resource-pattern-type", "match"),
    ("--list", "--principal", "User:bob"),
    ("--remove", "--force", "--topic", "orders", "--resource-pattern-type", "match"),
    ("--list",),
]  # fmt: skip


def _properties(side: Side, tmp_path: Path) -> str:
    path = tmp_path / f"{side.name}.properties"
    write_properties(path, side.java_properties())
    return str(path)


def test_aclgate_acls_bootstrap_server_equals_itself_on_kafka_and_kafka_acls(
    reference: Side, candidate: Side, tmp_path: Path
):
    outputs: dict[str, list] = {"kafka": [], "aclgate": []}
    for step in STEPS:
        for side in (reference, candidate):
            props = _properties(side, tmp_path)
            result = aclgate("--bootstrap-server", side.bootstrap, "--command-config", props, *step)
            assert result.returncode == 0, result.stderr
            outputs[side.name].append((step, normalized(result.stdout)))
    assert outputs["aclgate"] == outputs["kafka"]
    # and kafka-acls itself lists what `aclgate acls` listed (same lines, same format)
    listed = tools.kafka_acls(reference.bootstrap, "--list", config=reference.java_properties())
    assert normalized(listed.check().stdout) == outputs["kafka"][-1][1]
    assert outputs["kafka"][-1][1], "nothing left to compare"


def test_import_copies_a_clusters_acls_and_export_writes_them(
    reference: Side, candidate: Side, tmp_path: Path, kafka_authz
):
    props = _properties(reference, tmp_path)
    for step in STEPS[:3]:
        result = aclgate(
            "--bootstrap-server", reference.bootstrap, "--command-config", props, *step
        )
        assert result.returncode == 0, result.stderr
    acl_file = tmp_path / "imported.json"
    result = aclgate("import", "--from-cluster", reference.bootstrap, "--command-config", props,
                     "--acl-file", str(acl_file))  # fmt: skip
    assert result.returncode == 0, result.stderr
    imported = set(parse_acl_file(acl_file.read_text(), str(acl_file)))
    assert (
        result.stdout
        == f"Imported {len(imported)} ACLs from {reference.bootstrap} into {acl_file}\n"
    )
    # alice's 2, bob's producer 3 + IDEMPOTENT_WRITE on the cluster, the DENY
    in_kafka = kafka_authz.acls.list()
    assert len(imported) == len(in_kafka) == 7
    assert sorted((b.resource_name, b.principal, b.host) for b in imported) == sorted(
        (b.name, b.principal, b.host) for b in in_kafka
    )

    # the proxy's store gets them through the Admin API, then exports the same set
    assert candidate.proxy is not None
    candidate_props = _properties(candidate, tmp_path)
    exported = run("acls", "export", "--bootstrap-server", candidate.bootstrap,
                   "--command-config", candidate_props)  # fmt: skip
    assert exported.returncode == 0 and json.loads(exported.stdout)["acls"] == []
    proxy_file = candidate.proxy.server.acl_backend.store.path  # type: ignore[union-attr]
    proxy_file.write_text(acl_file.read_text())  # the proxy's file store, reloaded when polled
    candidate.proxy.run(candidate.proxy.server.watcher.reload_once)  # type: ignore[union-attr]
    out = tmp_path / "exported.json"
    exported = run("acls", "export", "--bootstrap-server", candidate.bootstrap,
                   "--command-config", candidate_props, "--output", str(out))  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    assert set(parse_acl_file(out.read_text(), str(out))) == imported
    # exporting a file gives the same document
    from_file = run("acls", "export", "--acl-file", str(acl_file))
    assert from_file.stdout == out.read_text()
