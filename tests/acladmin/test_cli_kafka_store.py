"""`aclgate acls --acl-store kafka`: the fleet's ACL topic managed with no proxy running.

Migration from broker-side ACLs (or from the file store) to a fleet on the `kafka` store:
`aclgate acls import --from-cluster` (`--from-file`) copies a live cluster's (a file's) ACLs
into the topic, over SASL_SSL with SCRAM (the
store's cluster is `kafka_secure`); after that, the same kafka-acls steps on the store and on
the source cluster print the same, and `export` of both writes the same ACL file (a proxy
enforcing what the topic holds is tests/aclstore/test_kafka_store_fleet.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aclgate.authz.aclfile import parse_acl_file
from tests.acladmin.conftest import Side
from tests.acladmin.test_cli_bootstrap import STEPS
from tests.acladmin.test_kafka_acls_tool import normalized
from tests.authz.cli import aclgate, run
from tests.kafka.cluster import KafkaCluster, write_properties

pytestmark = pytest.mark.kafka


def _store_options(cluster: KafkaCluster, topic: str, tmp_path: Path) -> tuple[str, ...]:
    listener = cluster.listener("SASL_SSL")
    user = next(iter(listener.users))
    props = tmp_path / "store.properties"
    write_properties(props, listener.java_properties(user, mechanism="SCRAM-SHA-512"))
    return ("--acl-store", "kafka", "--acl-bootstrap", listener.bootstrap,
            "--acl-topic", topic, "--acl-command-config", str(props))  # fmt: skip


def test_import_into_the_kafka_store_then_manage_it_like_kafka(
    reference: Side, kafka_secure: KafkaCluster, kafka_topic_name: str, tmp_path: Path
):
    source = tmp_path / "source.properties"
    write_properties(source, reference.java_properties())
    on_kafka = ("--bootstrap-server", reference.bootstrap, "--command-config", str(source))
    for step in STEPS[:3]:
        result = aclgate(*on_kafka, *step)
        assert result.returncode == 0, result.stderr
    topic = f"acls-{kafka_topic_name}"
    store = _store_options(kafka_secure, topic, tmp_path)

    result = aclgate("import", "--from-cluster", reference.bootstrap,
                     "--command-config", str(source), *store)  # fmt: skip
    assert result.returncode == 0, result.stderr
    where = f"the ACL topic {topic} on {kafka_secure.listener('SASL_SSL').bootstrap}"
    assert result.stdout == f"Imported 7 ACLs from {reference.bootstrap} into {where}\n"
    # importing again adds nothing: the store already holds every one of them
    again = aclgate("import", "--from-cluster", reference.bootstrap,
                    "--command-config", str(source), *store)  # fmt: skip
    assert again.returncode == 0, again.stderr

    for step in STEPS[3:]:  # list, match, by principal, remove by match, list
        outputs = [aclgate(*side, *step) for side in (on_kafka, store)]
        for result in outputs:
            assert result.returncode == 0, result.stderr
        assert normalized(outputs[1].stdout) == normalized(outputs[0].stdout), step
    assert normalized(outputs[1].stdout), "nothing left to compare"

    exports = [run("acls", "export", *side) for side in (on_kafka, store)]
    assert [e.returncode for e in exports] == [0, 0], [e.stderr for e in exports]
    assert exports[1].stdout == exports[0].stdout
    assert len(parse_acl_file(exports[1].stdout, "export")) == 5  # 7 less alice's 2 on orders

    # the file store's way in: an ACL file imported into a new topic holds the same policy
    acl_file = tmp_path / "acls.json"
    acl_file.write_text(exports[0].stdout)
    other = _store_options(kafka_secure, f"{topic}-from-file", tmp_path)
    result = aclgate("import", "--from-file", str(acl_file), *other)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Imported 5 ACLs from {acl_file} into the ACL topic ")
    assert run("acls", "export", *other).stdout == exports[0].stdout


def test_kafka_store_options_are_checked_before_anything_is_read(tmp_path: Path):
    result = aclgate("--acl-store", "kafka", "--list")
    assert result.returncode == 1
    assert (
        result.stderr
        == "Error while executing ACL command: --acl-store kafka needs --acl-bootstrap\n"
    )
    result = aclgate("--acl-store", "kafka", "--acl-file", str(tmp_path / "a.json"), "--list")
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (
        "Exactly one of --acl-file or --bootstrap-server must be specified (or --acl-store kafka)"
    )
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    result = aclgate("--acl-store", "kafka", "--acl-bootstrap", "127.0.0.1:1",
                     "--acl-command-config", str(bad), "--list")  # fmt: skip
    assert result.returncode == 1
    assert "sasl.mechanism GSSAPI" in result.stderr
    result = aclgate("--acl-file", str(tmp_path / "a.json"), "--acl-bootstrap", "x:1", "--list")
    assert result.stderr.splitlines()[0] == (
        "--acl-bootstrap and --acl-command-config go with --acl-store kafka"
    )
