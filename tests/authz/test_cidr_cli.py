"""CIDR ACL hosts (KIP-1276, opt-in) through the ACL file and the CLIs: `aclgate acls
--allow-host 10.0.0.0/8`, `aclgate check --acl-host-cidr`, the file watcher and the kafka
store's record decoding (docs/authz.md, "CIDR hosts (KIP-1276, opt-in)")."""

from __future__ import annotations

import json
import uuid

import pytest

from aclgate.authz.aclfile import AclFileError, dump_acl_file, parse_acl_file
from aclgate.authz.aclrecords import RecordDecodeError, decode, encode_value
from aclgate.authz.authorizer import Authorizer
from aclgate.proxy.aclstore.filewatch import AclFileWatcher
from tests.authz.cli import aclgate, run
from tests.authz.helpers import ALLOW, DENY, LIT, Op, T, acl

NETWORK = acl(T, "orders", LIT, "User:alice", "10.0.0.0/8", Op.READ, ALLOW)
CARVED = acl(T, "orders", LIT, "User:alice", "10.9.0.0/16", Op.READ, DENY)
BAD = acl(T, "orders", LIT, "User:alice", "10.0.0.0/33", Op.READ, ALLOW)


def test_the_file_parser_checks_cidr_hosts_only_when_asked():
    text = dump_acl_file([NETWORK, BAD])
    assert set(parse_acl_file(text)) == {NETWORK, BAD}  # Kafka 4.3.1: literal strings
    with pytest.raises(AclFileError) as caught:
        parse_acl_file(text, "acls.json", cidr_hosts=True)
    assert str(caught.value) == (
        "acls.json: acls[0].host: Invalid CIDR notation '10.0.0.0/33': "
        "Value [33] not in range [0,32]"
    )
    assert parse_acl_file(dump_acl_file([NETWORK]), cidr_hosts=True) == [NETWORK]


def test_the_watcher_keeps_the_policy_when_a_cidr_host_is_malformed(tmp_path):
    path = tmp_path / "acls.json"
    path.write_text(dump_acl_file([NETWORK]))
    authz = Authorizer(cidr_hosts=True)
    watcher = AclFileWatcher(path, authz)
    assert watcher.reload_once(strict=True)
    assert authz.authorize("User:alice", "10.1.2.3", Op.READ, T, "orders").allowed
    path.write_text(dump_acl_file([NETWORK, BAD]))
    assert watcher.reload_once() is False
    assert "Invalid CIDR notation '10.0.0.0/33'" in (watcher.last_error or "")
    assert authz.authorize("User:alice", "10.1.2.3", Op.READ, T, "orders").allowed
    with pytest.raises(AclFileError, match="Invalid CIDR notation"):
        AclFileWatcher(path, Authorizer(cidr_hosts=True)).reload_once(strict=True)
    off = Authorizer()
    AclFileWatcher(path, off).reload_once(strict=True)  # off: both load, as strings
    assert off.acl_count() == 2
    assert not off.authorize("User:alice", "10.1.2.3", Op.READ, T, "orders").allowed


def test_kafka_store_records_are_checked_with_the_option():
    acl_id = uuid.uuid4()
    value = encode_value(acl_id, BAD)
    key = str(acl_id).encode()
    assert decode(key, value, None, 7).binding == BAD
    with pytest.raises(RecordDecodeError, match="not a valid ACL: Invalid CIDR notation"):
        decode(key, value, None, 7, cidr_hosts=True)
    good = encode_value(acl_id, NETWORK)
    assert decode(key, good, None, 7, cidr_hosts=True).binding == NETWORK


def test_acls_cli_adds_a_cidr_host(tmp_path):
    path = tmp_path / "acls.json"
    result = aclgate(
        "--acl-file", str(path), "--add", "--allow-principal", "User:alice",
        "--allow-host", "10.0.0.0/8", "--allow-host", "2001:db8::/32",
        "--operation", "Read", "--topic", "orders",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "(principal=User:alice, host=10.0.0.0/8, operation=READ, permissionType=ALLOW)" in (
        result.stdout
    )
    assert {b.host for b in parse_acl_file(path.read_bytes(), cidr_hosts=True)} == {
        "10.0.0.0/8",
        "2001:db8::/32",
    }
    listed = aclgate("--acl-file", str(path), "--list", "--topic", "orders")
    assert "host=2001:db8::/32" in listed.stdout


def test_acls_cli_validates_cidr_hosts_with_the_option(tmp_path):
    path = tmp_path / "acls.json"
    args = ("--acl-file", str(path), "--add", "--allow-principal", "User:alice",
            "--allow-host", "10.0.0.0/33", "--operation", "Read", "--topic", "orders")  # fmt: skip
    refused = aclgate(*args, "--acl-host-cidr")
    assert refused.returncode == 1
    assert refused.stderr == (
        "Error while executing ACL command: Invalid CIDR notation '10.0.0.0/33': "
        "Value [33] not in range [0,32]\n"
    )
    assert not path.exists()
    assert aclgate(*args).returncode == 0  # Kafka 4.3.1 stores any host


def test_check_matches_client_hosts_in_a_network_only_with_the_option(tmp_path):
    policy = tmp_path / "acls.json"
    policy.write_text(dump_acl_file([NETWORK, CARVED]))
    queries = tmp_path / "queries.jsonl"
    hosts = ["10.1.2.3", "10.9.1.1", "11.0.0.1", "10.0.0.0/8"]
    query = {"principal": "User:alice", "operation": "READ", "resource_type": "TOPIC",
             "resource_name": "orders"}  # fmt: skip
    queries.write_text("".join(json.dumps({**query, "host": h}) + "\n" for h in hosts))

    def decided(*options):
        result = run("check", "--acl-file", str(policy), "--queries", str(queries), *options)
        assert result.returncode == 0, result.stderr
        return [(o["decision"], o["acl"] and o["acl"]["host"]) for o in map(json.loads, result.stdout.splitlines())]  # fmt: skip

    assert decided("--acl-host-cidr") == [
        ("ALLOWED", "10.0.0.0/8"),
        ("DENIED", "10.9.0.0/16"),
        ("DENIED", None),
        ("ALLOWED", "10.0.0.0/8"),  # a host equal to the string still matches it
    ]
    assert decided() == [
        ("DENIED", None),
        ("DENIED", None),
        ("DENIED", None),
        ("ALLOWED", "10.0.0.0/8"),
    ]
    policy.write_text(dump_acl_file([BAD]))
    refused = run("check", "--acl-file", str(policy), "--queries", str(queries), "--acl-host-cidr")
    assert refused.returncode == 2 and "Invalid CIDR notation '10.0.0.0/33'" in refused.stderr
