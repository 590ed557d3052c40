"""`aclgate acls`: suite F (Kafka's AclCommandTest; docs/authz.md, "Tests ported from Kafka")
adapted to the ACL-file store, run as subprocesses of the real console script.

Adapted rather than ported: F3/F4 (bootstrap server vs controller) and F13/F14 (bootstrap
option validation) become the --acl-file checks; F7/F8 (client.id MBean warnings) have no
equivalent. Each --bootstrap-controller twin is the same test here.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from aclgate.authz.aclfile import parse_acl_file
from aclgate.authz.model import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
)
from aclgate.authz.model import ResourceType as RT
from tests.authz.cli import ACLGATE, aclgate

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED

USERS = [
    "User:CN=writeuser,OU=Unknown,O=Unknown,L=Unknown,ST=Unknown,C=Unknown",
    "User:test2",
    "User:CN=\\#User with special chars in CN : (\\, \\+ \" \\ \\< \\> \\; ')",
]
HOSTS = ["host1", "host2"]

# F1: resource set -> (its command line, the operations it is tested with)
RESOURCE_SETS = {
    "topic": ([(RT.TOPIC, "test-1"), (RT.TOPIC, "test-2")], ["--topic", "test-1", "--topic", "test-2"],
              ["Read", "Write", "Create", "Describe", "Delete", "DescribeConfigs", "AlterConfigs", "Alter"]),
    "cluster": ([(RT.CLUSTER, CLUSTER_NAME)], ["--cluster"],
                ["Create", "ClusterAction", "DescribeConfigs", "AlterConfigs", "IdempotentWrite", "Alter", "Describe"]),
    "group": ([(RT.GROUP, "testGroup-1"), (RT.GROUP, "testGroup-2")],
              ["--group", "testGroup-1", "--group", "testGroup-2"], ["Read", "Describe", "Delete"]),
    "transactional-id": ([(RT.TRANSACTIONAL_ID, "t0"), (RT.TRANSACTIONAL_ID, "t1")],
                         ["--transactional-id", "t0", "--transactional-id", "t1"], ["Describe", "Write"]),
    "delegation-token": ([(RT.DELEGATION_TOKEN, "token1"), (RT.DELEGATION_TOKEN, "token2")],
                         ["--delegation-token", "token1", "--delegation-token", "token2"], ["Describe"]),
    "user": ([(RT.USER, "User:test-user1"), (RT.USER, "User:test-user2")],
             ["--user-principal", "User:test-user1", "--user-principal", "User:test-user2"],
             ["CreateTokens", "DescribeTokens"]),
}  # fmt: skip


def principal_args(perm: AclPermissionType) -> list[str]:
    kind = "allow" if perm == ALLOW else "deny"
    args = []
    for user in USERS:
        args += [f"--{kind}-host", "host1", f"--{kind}-host", "host2", f"--{kind}-principal", user]
    return args


def expected(resources, ops, perm=ALLOW, pattern=LIT, users=USERS, hosts=HOSTS) -> set[AclBinding]:
    return {
        AclBinding(rtype, name, pattern, user, host, op, perm)
        for rtype, name in resources
        for user in users
        for host in hosts
        for op in ops
    }


def stored(path) -> set[AclBinding]:
    return set(parse_acl_file(path.read_bytes())) if path.exists() else set()


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert (result.returncode, result.stderr) == (0, ""), result
    return result.stdout


@pytest.fixture
def acl_file(tmp_path):
    return tmp_path / "acls.json"


# --------------------------------------------------------------------------- F1 / F2


@pytest.mark.parametrize("perm", [ALLOW, DENY], ids=["allow", "deny"])
@pytest.mark.parametrize("which", list(RESOURCE_SETS))
def test_f1_acl_cli(acl_file, which, perm):
    resources, resource_cmd, op_names = RESOURCE_SETS[which]
    ops = [getattr(Op, _enum_name(o)) for o in op_names]
    op_args = [a for o in op_names for a in ("--operation", o)]
    out = ok(
        aclgate(
            "--acl-file", str(acl_file), *principal_args(perm), *resource_cmd, *op_args, "--add"
        )
    )
    for rtype, name in resources:
        assert (
            f"Adding ACLs for resource `ResourcePattern(resourceType={rtype.name}, name={name}, "
            "patternType=LITERAL)`:" in out
        )
    assert stored(acl_file) == expected(resources, ops, perm)
    out = ok(aclgate("--acl-file", str(acl_file), "--list"))
    for rtype, name in resources:
        assert (
            f"Current ACLs for resource `ResourcePattern(resourceType={rtype.name}, name={name}, "
            "patternType=LITERAL)`:" in out
        )
    ok(aclgate("--acl-file", str(acl_file), *resource_cmd, "--remove", "--force"))
    assert stored(acl_file) == set()


def _enum_name(pascal: str) -> str:
    return "".join("_" + c if c.isupper() else c.upper() for c in pascal).lstrip("_")


# --------------------------------------------------------------------------- F5 / F6

TOPICS = [(RT.TOPIC, "test-1"), (RT.TOPIC, "test-2")]
GROUPS = [(RT.GROUP, "testGroup-1"), (RT.GROUP, "testGroup-2")]
TXNS = [(RT.TRANSACTIONAL_ID, "t0"), (RT.TRANSACTIONAL_ID, "t1")]
CLUSTER = [(RT.CLUSTER, CLUSTER_NAME)]
TOPIC_ARGS = ["--topic", "test-1", "--topic", "test-2"]
GROUP_ARGS = ["--group", "testGroup-1", "--group", "testGroup-2"]
TXN_ARGS = ["--transactional-id", "t0", "--transactional-id", "t1"]
PRODUCER_TOPIC_OPS = [Op.WRITE, Op.DESCRIBE, Op.CREATE]
PRODUCER_TXN_OPS = [Op.WRITE, Op.DESCRIBE]

EXPANSIONS = {
    "producer": (["--producer"], TOPIC_ARGS + TXN_ARGS + ["--cluster"],
                 expected(TOPICS, PRODUCER_TOPIC_OPS) | expected(TXNS, PRODUCER_TXN_OPS)),
    "producer-idempotent": (["--producer", "--idempotent"], TOPIC_ARGS + TXN_ARGS + ["--cluster"],
                            expected(TOPICS, PRODUCER_TOPIC_OPS) | expected(TXNS, PRODUCER_TXN_OPS)
                            | expected(CLUSTER, [Op.IDEMPOTENT_WRITE])),
    "consumer": (["--consumer"], TOPIC_ARGS + GROUP_ARGS,
                 expected(TOPICS, [Op.READ, Op.DESCRIBE]) | expected(GROUPS, [Op.READ])),
    "producer-consumer": (["--producer", "--consumer"], TOPIC_ARGS + GROUP_ARGS,
                          expected(TOPICS, [Op.READ, Op.DESCRIBE, Op.WRITE, Op.CREATE])
                          | expected(GROUPS, [Op.READ])),
    "producer-idempotent-consumer": (["--producer", "--idempotent", "--consumer"], TOPIC_ARGS + GROUP_ARGS,
                                     expected(TOPICS, [Op.READ, Op.DESCRIBE, Op.WRITE, Op.CREATE])
                                     | expected(GROUPS, [Op.READ]) | expected(CLUSTER, [Op.IDEMPOTENT_WRITE])),
}  # fmt: skip


@pytest.mark.parametrize("which", list(EXPANSIONS))
def test_f5_producer_consumer_expansions(acl_file, which):
    flags, resource_args, acls = EXPANSIONS[which]
    ok(
        aclgate(
            "--acl-file", str(acl_file), *principal_args(ALLOW), *resource_args, *flags, "--add"
        )
    )
    assert stored(acl_file) == acls
    ok(aclgate("--acl-file", str(acl_file), *resource_args, *flags, "--remove", "--force"))
    assert stored(acl_file) == set()


def test_f9_prefixed_producer(acl_file):
    cmd = ["--acl-file", str(acl_file), "--allow-principal", "User:test2", "--producer",
           "--topic", "Test-", "--resource-pattern-type", "Prefixed"]  # fmt: skip
    ok(aclgate(*cmd, "--add"))
    assert stored(acl_file) == expected(
        [(RT.TOPIC, "Test-")], PRODUCER_TOPIC_OPS, pattern=PRE, users=["User:test2"], hosts=["*"]
    )
    ok(aclgate(*cmd, "--remove", "--force"))
    assert stored(acl_file) == set()


def test_idempotent_cluster_acl_is_literal_even_with_prefixed_topics(acl_file):
    ok(aclgate("--acl-file", str(acl_file), "--allow-principal", "User:p", "--producer",
               "--idempotent", "--topic", "orders-", "--resource-pattern-type", "prefixed", "--add"))  # fmt: skip
    cluster = {b for b in stored(acl_file) if b.resource_type == RT.CLUSTER}
    assert cluster == {
        AclBinding(RT.CLUSTER, CLUSTER_NAME, LIT, "User:p", "*", Op.IDEMPOTENT_WRITE, ALLOW)
    }


@pytest.mark.parametrize("pattern", list(PatternType))
def test_f11_pattern_types(acl_file, pattern):
    """--add works only for LITERAL and PREFIXED; --list and --remove for all but UNKNOWN."""
    base = ["--acl-file", str(acl_file)]
    ok(aclgate(*base, "--allow-principal", "User:other", "--topic", "Test", "--add"))
    add = aclgate(*base, "--allow-principal", "User:test2", "--producer", "--topic", "Test",
                  "--add", "--resource-pattern-type", pattern.name)  # fmt: skip
    listing = aclgate(*base, "--topic", "Test", "--list", "--resource-pattern-type", pattern.name)
    remove = aclgate(*base, "--topic", "Test", "--force", "--remove", "--resource-pattern-type", pattern.name)  # fmt: skip
    assert (add.returncode == 0) == (pattern in (LIT, PRE)), add
    if pattern == PatternType.UNKNOWN:
        assert listing.returncode == remove.returncode == add.returncode == 1
        assert listing.stderr.startswith("Unknown resource-pattern-type: UNKNOWN\n")
        assert add.stderr.startswith("Unknown resource-pattern-type: UNKNOWN\n")
    else:
        assert listing.returncode == remove.returncode == 0, (listing, remove)
        shown = "PREFIXED" if pattern == PRE else "LITERAL"  # an exact filter shows its own
        assert (
            f"ResourcePattern(resourceType=TOPIC, name=Test, patternType={shown})" in listing.stdout
        )
    if pattern in (PatternType.ANY, PatternType.MATCH):
        assert add.stderr.startswith(
            f"A '--resource-pattern-type' value of '{pattern.name}' is not valid when adding acls."
        )
    if pattern in (LIT, PatternType.ANY, PatternType.MATCH):  # these filters cover (Test, LITERAL)
        assert not any(
            b.resource_name == "Test" and b.pattern_type == LIT for b in stored(acl_file)
        )


# --------------------------------------------------------------------------- F13 - F20

USAGE_ERRORS = [
    (["--add", "--list"], "Command must include exactly one action: --list, --add, --remove. "),
    (["--add", "--list", "--remove"], "Command must include exactly one action: --list, --add, --remove. "),
    ([], "Command must include exactly one action: --list, --add, --remove. "),
    (["--add", "--principal", "User:CN=client"], "The --principal option is only available if --list is set"),
    (["--add", "--producer"], "With --producer you must specify a --topic"),
    (["--add", "--idempotent"], "The --idempotent option is only available if --producer is set"),
    (["--add", "--consumer"], "With --consumer you must specify a --topic and a --group and no --cluster or --transactional-id option should be specified."),
    (["--add", "--consumer", "--topic", "t", "--group", "g", "--cluster"], "With --consumer you must specify a --topic and a --group and no --cluster or --transactional-id option should be specified."),
    (["--list", "--producer"], 'Option "[list]" can\'t be used with option "[producer]"'),
    (["--list", "--allow-principal", "User:a"], 'Option "[list]" can\'t be used with option "[allow-principal]"'),
    (["--add", "--producer", "--operation", "Read", "--topic", "t"], 'Option "[producer]" can\'t be used with option "[operation]"'),
    (["--add", "--consumer", "--operation", "Read", "--topic", "test-topic", "--group", "test-group"], 'Option "[consumer]" can\'t be used with option "[operation]"'),
    (["--add", "--consumer", "--deny-principal", "User:a", "--topic", "t", "--group", "g"], 'Option "[consumer]" can\'t be used with option "[deny-principal]"'),
    (["--add", "--topic", "t"], "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."),
    (["--add", "--allow-principal", "User:a"], "You must provide at least one resource: --topic <topic> or --cluster or --group <group> or --delegation-token <Delegation Token ID>"),
    (["--add", "--allow-principal", "User:a", "--group", "g", "--operation", "Write"], "ResourceType GROUP only supports operations Read, Describe, Delete, DescribeConfigs, AlterConfigs, All"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--operation", "Describe_Configs"], "ResourceType TOPIC only supports operations Read, Write, Create, Describe, Delete, Alter, DescribeConfigs, AlterConfigs, All"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"], "A '--resource-pattern-type' value of 'MATCH' is not valid when adding acls."),
    (["--list", "--resource-pattern-type", "bogus"], "Value [bogus] is not one of [ANY|MATCH|LITERAL|PREFIXED]"),
    (["--list", "--no-such-option"], "unrecognized option --no-such-option"),
    (["--list", "--alow-principal", "User:x"], "unrecognized option --alow-principal; did you mean --allow-principal?"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "message"), USAGE_ERRORS)
def test_f15_f20_usage_errors(acl_file, args, message):
    result = aclgate("--acl-file", str(acl_file), *args)
    assert result.returncode == 1
    assert result.stdout == ""
    first, _, rest = result.stderr.partition("\n")
    assert first == message
    # Kafka follows it with the whole help, which scrolls the message away (issue 23)
    assert rest == "see `aclgate acls --help`\n"
    assert not acl_file.exists()


def test_f19_consumer_with_required_options_passes_validation(acl_file):
    ok(aclgate("--acl-file", str(acl_file), "--add", "--consumer", "--topic", "test-topic",
               "--group", "test-group", "--allow-principal", "User:c"))  # fmt: skip


def test_f13_f14_target_store_is_required(acl_file):
    one = "Exactly one of --acl-file or --bootstrap-server must be specified"
    result = aclgate("--list")
    assert (result.returncode, result.stderr.splitlines()[0]) == (1, one)
    result = aclgate("--acl-file", str(acl_file), "--bootstrap-server", "localhost:9092", "--list")
    assert (result.returncode, result.stderr.splitlines()[0]) == (1, one)
    result = aclgate("--bootstrap-controller", "localhost:9093", "--list")
    assert result.returncode == 1 and "use --bootstrap-server" in result.stderr
    result = aclgate("--acl-file", str(acl_file), "--command-config", "x.properties", "--list")
    assert result.stderr.splitlines()[0] == "--command-config goes with --bootstrap-server"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--allow-principal", "alice", "--topic", "t"],
         "expected a string in format principalType:principalName but got alice"),
        (["--allow-principal", "User:a", "--topic", " "], "Invalid empty resource name"),
    ],
)  # fmt: skip
def test_execution_errors(acl_file, args, message):
    result = aclgate("--acl-file", str(acl_file), "--add", *args)
    assert result.returncode == 1
    assert result.stderr == f"Error while executing ACL command: {message}\n"
    assert not acl_file.exists()


# --------------------------------------------------------------------------- output layout


def test_add_and_list_output_is_kafkas_layout(acl_file):
    out = ok(aclgate("--acl-file", str(acl_file), "--add", "--allow-principal", "User:alice",
                     "--operation", "Read", "--operation", "Write", "--topic", "orders"))  # fmt: skip
    assert out == (
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`: \n"
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW) \n\n"
    )
    ok(aclgate("--acl-file", str(acl_file), "--add", "--deny-principal", "User:bob",
               "--deny-host", "10.0.0.1", "--operation", "Describe", "--group", "billing"))  # fmt: skip
    out = ok(aclgate("--acl-file", str(acl_file), "--list"))
    assert out == (
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`: \n"
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW) \n\n"
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=billing, patternType=LITERAL)`: \n"
        " \t(principal=User:bob, host=10.0.0.1, operation=DESCRIBE, permissionType=DENY) \n\n"
    )
    out = ok(aclgate("--acl-file", str(acl_file), "--list", "--principal", "User:bob"))
    assert out == (
        "ACLs for principal `User:bob`\n"
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=billing, patternType=LITERAL)`: \n"
        " \t(principal=User:bob, host=10.0.0.1, operation=DESCRIBE, permissionType=DENY) \n\n"
    )


def test_list_with_match_filter_shows_acls_affecting_a_name(acl_file):
    base = ["--acl-file", str(acl_file), "--allow-principal", "User:a", "--add"]
    ok(aclgate(*base, "--topic", "orders-", "--resource-pattern-type", "prefixed"))
    ok(aclgate(*base, "--topic", "*"))
    ok(aclgate(*base, "--topic", "payments"))
    out = ok(aclgate("--acl-file", str(acl_file), "--list", "--topic", "orders-eu",
                     "--resource-pattern-type", "match"))  # fmt: skip
    assert "name=orders-, patternType=PREFIXED" in out and "name=*, patternType=LITERAL" in out
    assert "payments" not in out


def test_list_missing_file_is_an_error(acl_file):
    result = aclgate("--acl-file", str(acl_file), "--list")
    assert result.returncode == 1
    assert (
        result.stderr == f"Error while executing ACL command: {acl_file}: ACL file does not exist\n"
    )


# --------------------------------------------------------------------------- remove


def test_remove_asks_for_confirmation(acl_file):
    ok(aclgate("--acl-file", str(acl_file), "--add", "--allow-principal", "User:a", "--topic", "t"))
    before = stored(acl_file)
    result = aclgate("--acl-file", str(acl_file), "--remove", "--topic", "t", stdin="n\n")
    assert result.returncode == 0
    assert result.stdout == (
        "Are you sure you want to delete all ACLs for resource filter "
        "`ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`? (y/n)\n"
    )
    assert stored(acl_file) == before
    result = aclgate("--acl-file", str(acl_file), "--remove", "--topic", "t", stdin="")
    assert result.returncode == 1 and "use --force" in result.stderr
    assert stored(acl_file) == before
    result = aclgate("--acl-file", str(acl_file), "--remove", "--topic", "t",
                     "--allow-principal", "User:a", "--operation", "All", stdin="Y\n")  # fmt: skip
    assert result.stdout == (
        "Are you sure you want to remove ACLs: \n"
        " \t(principal=User:a, host=*, operation=ALL, permissionType=ALLOW) \n"
        " from resource filter `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`? (y/n)\n"
    )
    assert stored(acl_file) == set()


def test_remove_only_the_named_entries(acl_file):
    base = ["--acl-file", str(acl_file), "--topic", "t", "--allow-principal", "User:a"]
    ok(aclgate(*base, "--operation", "Read", "--operation", "Write", "--add"))
    ok(aclgate(*base, "--operation", "Write", "--remove", "--force"))
    assert stored(acl_file) == {AclBinding(RT.TOPIC, "t", LIT, "User:a", "*", Op.READ, ALLOW)}


def test_remove_missing_file_is_an_error(acl_file):
    result = aclgate("--acl-file", str(acl_file), "--remove", "--force", "--topic", "t")
    assert result.returncode == 1 and "ACL file does not exist" in result.stderr


# --------------------------------------------------------------------------- concurrency


def test_concurrent_adds_from_many_processes_lose_nothing(acl_file):
    def command(i: int) -> list[str]:
        return [ACLGATE, "acls", "--acl-file", str(acl_file), "--add", "--allow-principal",
                f"User:p{i}", "--operation", "Read", "--operation", "Describe",
                "--topic", f"topic-{i}", "--group", f"group-{i}"]  # fmt: skip

    procs = [
        subprocess.Popen(command(i), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for i in range(12)
    ]
    errors = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 12, errors
    acls = stored(acl_file)
    assert len(acls) == 12 * 2 * 2
    assert {b.principal for b in acls} == {f"User:p{i}" for i in range(12)}
    json.loads(acl_file.read_text())  # still one well-formed document
    assert not list(acl_file.parent.glob(".acls.json.*.tmp"))  # no temp files left behind
