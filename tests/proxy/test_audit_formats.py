"""--audit-format (proxy/audit/formats.py; docs/audit.md, "Formats"): the default stays today's
event byte for byte; `cloudevents` and `ocsf` lines are made from that same event, once per
written line, decision and `acl_change` lines alike, and are valid against each format's
published JSON schema (tests/data/README.md: the CloudEvents 1.0 schema of cloudevents/spec
v1.0.2, OCSF 1.8.0 API Activity with the datetime and security_control profiles); a running
proxy writes them to its file and to its topic (CloudEvents with the Kafka binding's
content-type header)."""

from __future__ import annotations

import json
import logging
import uuid
from functools import cache
from pathlib import Path

import jsonschema
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from aclgate import __version__
from aclgate.authz.decision import DEFAULT_DENY, NO_ACL_ALLOW, Decision
from aclgate.authz.model import AclBinding as Binding
from aclgate.proxy.audit import formats
from aclgate.proxy.audit.kafka import AuditTopicSettings, KafkaAuditSink, headers_of
from aclgate.proxy.audit.log import AuditLog
from aclgate.proxy.audit.spool import AuditSpool
from tests.enforce.conftest import start_enforced, users_file  # noqa: F401 (a fixture)
from tests.enforce.test_clients_enforced import create_topics, produce
from tests.fixtures.decisions import decision_record
from tests.fixtures.wait import wait_until

DATA = Path(__file__).resolve().parents[1] / "data"
SCHEMAS = {
    "cloudevents": DATA / "cloudevents" / "cloudevents.json",
    "ocsf": DATA / "ocsf" / "api_activity-1.8.0.schema.json",
}
EVENT_FIELDS = [
    "schema_version", "ts", "ts_first", "count", "proxy", "listener", "principal", "groups",
    "host", "client_id", "api", "api_key", "api_version", "operation", "resource_type",
    "resource_name", "decision", "enforced", "rule", "acl",
]  # fmt: skip
ACL = {
    "resource_type": "TOPIC",
    "resource_name": "ord",
    "pattern_type": "PREFIXED",
    "principal": "User:alice",
    "host": "*",
    "operation": "WRITE",
    "permission_type": "ALLOW",
}


@cache
def validator(name: str) -> jsonschema.protocols.Validator:
    """The published schema of format `name`, checked itself, with its formats checked."""
    schema = json.loads(SCHEMAS[name].read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def assert_valid(name: str, line: dict) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator(name).iter_errors(line)]
    assert not errors, f"not a valid {name} line: {errors}\n{json.dumps(line)}"


def test_the_schemas_catch_what_they_should():
    """The validators are not vacuous: a missing required attribute, a time that is not RFC
    3339, a source that is not a URI reference, a wrong class are all refused."""
    ce = {"specversion": "1.0", "id": "1", "source": "aclgate://p", "type": "t"}
    validator("cloudevents").validate(ce)
    for broken in ({**ce, "time": "yesterday"}, {**ce, "source": "a b"}, {"id": "1"}):
        assert not validator("cloudevents").is_valid(broken)
    line = formats.ocsf(event())
    validator("ocsf").validate(line)
    for broken in (
        {k: v for k, v in line.items() if k != "actor"},
        {**line, "class_uid": 3003},
        {**line, "metadata": {"product": {"name": "aclgate"}}},  # no version
        {**line, "metadata": {**line["metadata"], "product": {"version": __version__}}},  # no name
        {**line, "time": line["time_dt"]},
        {**line, "disposition_id": 1000},
    ):
        assert not validator("ocsf").is_valid(broken)


# --------------------------------------------------------------------- the conversions


def event(**changes) -> dict:
    """A decision event as proxy/audit/log.py writes it."""
    base = {
        "schema_version": 1, "ts": "2026-11-21T12:00:00.123456Z", "ts_first": None,
        "count": 1, "proxy": "aclgate-1", "listener": "SASL_SSL", "principal": "User:alice",
        "groups": ["Group:payments", "Group:sre"], "host": "10.1.2.3", "client_id": "rdkafka",
        "api": "Produce", "api_key": 0, "api_version": 9, "operation": "WRITE",
        "resource_type": "TOPIC", "resource_name": "orders", "decision": "ALLOWED",
        "enforced": True, "rule": "ACL", "acl": ACL,
    }  # fmt: skip
    return {**base, **changes}


def acl_change(**changes) -> dict:
    base = {
        "schema_version": 1, "event": "acl_change", "ts": "2026-11-21T12:00:01.000000Z",
        "proxy": "aclgate-1", "listener": "SASL_SSL", "principal": "User:admin",
        "host": "10.1.2.9", "client_id": "adminclient-1", "api": "CreateAcls", "api_key": 30,
        "store": "file", "result": "COMMITTED", "error": None,
        "added": [{**ACL, "resource_name": "orders", "pattern_type": "LITERAL"}, ACL],
        "removed": [],
    }  # fmt: skip
    return {**base, **changes}


def test_cloudevents_carry_the_event_as_data():
    convert = formats.formatter("cloudevents", "aclgate-1")
    assert convert is not None
    decision = event(ts_first="2026-11-21T11:59:55.000001Z", count=7)
    line = convert(decision)
    assert line == {
        "specversion": "1.0",
        "id": line["id"],
        "source": "aclgate://aclgate-1",
        "type": "io.aclgate.authorization.decision",
        "time": "2026-11-21T12:00:00.123456Z",
        "subject": "TOPIC:orders",
        "datacontenttype": "application/json",
        "data": decision,
    }
    change = convert(acl_change())
    assert change["type"] == "io.aclgate.acl.change" and "subject" not in change
    assert change["data"] == acl_change() and change["time"] == acl_change()["ts"]
    ids = {convert(event())["id"] for _ in range(1000)} | {line["id"], change["id"]}
    assert len(ids) == 1002  # unique per line, and per audit log (a random prefix)
    assert formats.formatter("cloudevents", "aclgate-1")(event())["id"] not in ids
    for each in (line, change):
        assert_valid("cloudevents", each)
        assert json.dumps(each, separators=(",", ":")).startswith(formats.CLOUDEVENTS_PREFIX)


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("aclgate-1", "aclgate://aclgate-1"),
        ("127.0.0.1:9092", "aclgate://127.0.0.1:9092"),
        ("::1:9092", "aclgate://%3A%3A1%3A9092"),  # IPv6 --listen: not an authority as it is
        ("proxy 1/eu", "aclgate://proxy%201%2Feu"),
    ],
)
def test_the_cloudevents_source_names_the_proxy_as_a_uri(name, source):
    line = formats.formatter("cloudevents", name)(event(proxy=name))
    assert line["source"] == source
    assert_valid("cloudevents", line)


def test_ocsf_maps_a_decision_to_an_api_activity():
    allowed = formats.ocsf(event(ts_first="2026-11-21T11:59:55.000001Z", count=7))
    assert_valid("ocsf", allowed)
    assert allowed == {
        "category_uid": 6,
        "category_name": "Application Activity",
        "class_uid": 6003,
        "class_name": "API Activity",
        "activity_id": 3,
        "activity_name": "Update",
        "type_uid": 600303,
        "type_name": "API Activity: Update",
        "severity_id": 1,
        "severity": "Informational",
        "time": 1795262400123,
        "time_dt": "2026-11-21T12:00:00.123456Z",
        "count": 7,
        "start_time": 1795262395000,
        "start_time_dt": "2026-11-21T11:59:55.000001Z",
        "end_time": 1795262400123,
        "end_time_dt": "2026-11-21T12:00:00.123456Z",
        "message": "User:alice ALLOWED WRITE on TOPIC:orders (Produce)",
        "status_id": 1,
        "status": "Success",
        "action_id": 1,
        "action": "Allowed",
        "disposition_id": 1,
        "disposition": "Allowed",
        "metadata": {
            "version": "1.8.0",
            "product": {"name": "aclgate", "vendor_name": "aclgate", "version": __version__},
            "profiles": ["datetime", "security_control"],
            "log_name": "aclgate audit",
            "log_version": "1",
        },
        "actor": {
            "user": {
                "uid": "User:alice",
                "name": "alice",
                "groups": [
                    {"uid": "Group:payments", "name": "payments"},
                    {"uid": "Group:sre", "name": "sre"},
                ],
            }
        },
        "src_endpoint": {"ip": "10.1.2.3"},
        "dst_endpoint": {"name": "aclgate-1", "svc_name": "kafka"},
        "api": {"operation": "Produce", "service": {"name": "kafka"}, "version": "9"},
        "resources": [{"type": "TOPIC", "name": "orders"}],
        "unmapped": {
            "listener": "SASL_SSL",
            "client_id": "rdkafka",
            "api_key": 0,
            "operation": "WRITE",
            "enforced": True,
            "rule": "ACL",
            "acl": ACL,
        },
    }
    denied = formats.ocsf(
        event(decision="DENIED", rule="DEFAULT_DENY", acl=None, groups=[], operation="READ")
    )
    assert_valid("ocsf", denied)
    assert (denied["activity_id"], denied["type_uid"], denied["severity_id"]) == (2, 600302, 3)
    assert (denied["action_id"], denied["disposition_id"], denied["status_id"]) == (2, 2, 2)
    assert "start_time" not in denied and denied["actor"]["user"]["groups"] == []
    dry_run = formats.ocsf(event(decision="DENIED", enforced=False, client_id=None))
    assert_valid("ocsf", dry_run)
    assert (dry_run["action_id"], dry_run["disposition"], dry_run["status"]) == (
        2,
        "Logged",
        "Success",
    )
    assert dry_run["message"].endswith("(Produce), dry-run: not enforced")
    for operation, activity in [("CREATE", 1), ("DESCRIBE_CONFIGS", 2), ("ALTER", 3),
                                ("DELETE", 4), ("CLUSTER_ACTION", 99), ("ALL", 99)]:  # fmt: skip
        line = formats.ocsf(event(operation=operation, resource_type="CLUSTER"))
        assert (line["activity_id"], line["type_uid"]) == (activity, 600300 + activity)
        assert_valid("ocsf", line)
    # an event written before `groups` existed (a spooled line of an older version)
    old = {k: v for k, v in event().items() if k != "groups"}
    assert "groups" not in formats.ocsf(old)["actor"]["user"]


def test_ocsf_maps_an_acl_change_to_an_api_activity():
    created = formats.ocsf(acl_change())
    assert_valid("ocsf", created)
    assert (created["activity_id"], created["activity_name"], created["type_uid"]) == (
        1,
        "Create",
        600301,
    )
    assert created["status"] == "Success" and "status_detail" not in created
    assert created["resources"] == [{"type": "TOPIC", "name": "orders"}, {"type": "TOPIC", "name": "ord"}]  # fmt: skip
    assert created["unmapped"] == {
        "event": "acl_change",
        "listener": "SASL_SSL",
        "client_id": "adminclient-1",
        "api_key": 30,
        "store": "file",
        "result": "COMMITTED",
        "error": None,
        "added": acl_change()["added"],
        "removed": [],
    }
    assert "action_id" not in created and created["metadata"]["profiles"] == ["datetime"]
    assert created["actor"] == {"user": {"uid": "User:admin", "name": "admin"}}
    assert "version" not in created["api"]  # an acl_change names no API version
    failed = formats.ocsf(
        acl_change(api="DeleteAcls", api_key=31, result="FAILED", error="the store is down",
                   added=[], removed=[ACL])
    )  # fmt: skip
    assert_valid("ocsf", failed)
    assert (failed["activity_name"], failed["status_id"], failed["status_detail"]) == (
        "Delete",
        2,
        "the store is down",
    )
    assert failed["message"] == "User:admin DeleteAcls: 0 ACLs added, 1 removed (FAILED)"


def test_the_principal_of_a_line_of_any_format():
    """What the topic sink keys a spooled line by, whatever format wrote it."""
    convert = formats.formatter("cloudevents", "p")
    assert convert is not None
    for line in (event(), convert(event()), formats.ocsf(event())):
        assert formats.principal_of(json.loads(json.dumps(line))) == "User:alice"
    for line in (acl_change(), convert(acl_change()), formats.ocsf(acl_change())):
        assert formats.principal_of(line) == "User:admin"


def test_only_cloudevents_lines_get_the_content_type_header():
    convert = formats.formatter("cloudevents", "p")
    assert convert is not None
    lines = {
        name: json.dumps(line, separators=(",", ":")) + "\n"
        for name, line in (
            ("aclgate", event()),
            ("cloudevents", convert(event())),
            ("ocsf", formats.ocsf(event())),
        )
    }
    assert headers_of(lines["cloudevents"]) == [
        ("content-type", b"application/cloudevents+json; charset=UTF-8")
    ]
    assert headers_of(lines["aclgate"]) is None and headers_of(lines["ocsf"]) is None


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="unknown audit format 'cef'"):
        formats.formatter("cef", "p")


# --------------------------------------------------------------------- the audit log


class Clock:
    def __init__(self, t: float = 1_800_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def drive(log: AuditLog, clock: Clock) -> None:
    """The same decisions and ACL changes for every log: allowed decisions aggregated (one
    with the deciding ACL, one by default, with groups), an enforced and a dry-run denial, an
    ACL change committed and one failed."""
    acl = Binding.from_dict(ACL)
    groups = frozenset({"Group:sre", "Group:payments"})
    for _ in range(3):
        log.record(decision_record(Decision(True, "ACL", acl), "orders", listener="SASL_SSL",
                                   groups=groups))  # fmt: skip
        clock.t += 0.25
    log.record(decision_record(NO_ACL_ALLOW, "free", operation="READ", client_id=None))
    log.record(decision_record(DEFAULT_DENY, "secret", "User:mallory", operation="READ"))
    log.record(decision_record(DEFAULT_DENY, "secret", "User:carol", enforced=False))
    clock.t += 1
    log.record_acl_change("SASL_SSL", "User:admin", "10.1.2.9", "admin-1", "CreateAcls", 30,
                          "file", [acl], [], None)  # fmt: skip
    log.record_acl_change("SASL_SSL", "User:admin", "10.1.2.9", None, "DeleteAcls", 31,
                          "kafka", [], [acl], "the store did not commit")  # fmt: skip
    clock.t += 11
    log.tick()
    log.close()


def written(tmp_path: Path, name: str, audit_format: str | None) -> list[str]:
    clock = Clock()
    extra = {} if audit_format is None else {"format": audit_format}
    log = AuditLog(tmp_path / name, "aclgate-1", window=10, clock=clock, **extra)
    drive(log, clock)
    return (tmp_path / name).read_text(encoding="utf-8").splitlines()


def test_the_default_format_is_todays_event_byte_for_byte(tmp_path):
    default = written(tmp_path, "default.jsonl", None)
    assert written(tmp_path, "aclgate.jsonl", "aclgate") == default
    assert AuditLog(None, "p", format="aclgate")._convert is None  # nothing in the hot path
    events = [json.loads(line) for line in default]
    assert len(events) == 6
    # the denials first (written at once), then the ACL changes, then the window's allowed
    assert [e.get("event") or e["decision"] for e in events] == [
        "DENIED", "DENIED", "acl_change", "acl_change", "ALLOWED", "ALLOWED",
    ]  # fmt: skip
    assert [list(e) for e in events if "event" not in e] == [EVENT_FIELDS] * 4
    assert default[4] == (
        '{"schema_version":1,"ts":"2027-01-15T08:00:00.500000Z",'
        '"ts_first":"2027-01-15T08:00:00.000000Z","count":3,"proxy":"aclgate-1",'
        '"listener":"SASL_SSL","principal":"User:alice","groups":["Group:payments","Group:sre"],'
        '"host":"10.0.0.1","client_id":"c","api":"Produce","api_key":0,"api_version":9,'
        '"operation":"WRITE","resource_type":"TOPIC","resource_name":"orders",'
        '"decision":"ALLOWED","enforced":true,"rule":"ACL","acl":{"resource_type":"TOPIC",'
        '"resource_name":"ord","pattern_type":"PREFIXED","principal":"User:alice","host":"*",'
        '"operation":"WRITE","permission_type":"ALLOW"}}'
    )


@pytest.mark.parametrize("audit_format", ["cloudevents", "ocsf"])
def test_every_line_of_the_log_is_converted_once_and_valid(tmp_path, audit_format):
    """Each written line is the conversion of the default format's line, valid against the
    format's schema; one conversion per line (not per decision: 3 decisions, 1 line)."""
    default = [json.loads(line) for line in written(tmp_path, "default.jsonl", None)]
    clock = Clock()
    log = AuditLog(tmp_path / "f.jsonl", "aclgate-1", window=10, clock=clock, format=audit_format)
    convert, calls = log._convert, []
    assert convert is not None
    log._convert = lambda e: calls.append(e) or convert(e)
    drive(log, clock)
    lines = [json.loads(line) for line in (tmp_path / "f.jsonl").read_text().splitlines()]
    assert len(calls) == len(lines) == log.lines_written == len(default) == 6
    assert calls == default
    for line, original in zip(lines, default, strict=True):
        assert_valid(audit_format, line)
        if audit_format == "cloudevents":
            assert line["data"] == original and line["source"] == "aclgate://aclgate-1"
        else:
            assert line == formats.ocsf(original)


# --------------------------------------------------------------------- settings


def test_the_setting_on_the_command_line_and_in_toml(tmp_path):
    import argparse

    from aclgate.proxy.cli import serve
    from aclgate.proxy.config import from_args

    parser = argparse.ArgumentParser(prog="aclgate serve")
    serve.configure(parser)
    base = ["--upstream", "127.0.0.1:9092"]
    assert from_args(parser.parse_args(base)).audit_format == "aclgate"
    assert from_args(parser.parse_args([*base, "--audit-format", "OCSF"])).audit_format == "ocsf"
    toml = tmp_path / "aclgate.toml"
    toml.write_text('upstream = ["127.0.0.1:9092"]\naudit_format = "cloudevents"\n')
    assert from_args(parser.parse_args(["--config", str(toml)])).audit_format == "cloudevents"
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--audit-format", "cef"])


# --------------------------------------------------------------------- a running proxy


def write_acls(path: Path) -> None:
    """bob may write and describe orders-*; nobody else anything (User:admin: a super user)."""
    acls = [
        {"resource_type": "TOPIC", "resource_name": "orders-", "pattern_type": "PREFIXED",
         "principal": "User:bob", "host": "*", "operation": op, "permission_type": "ALLOW"}
        for op in ("WRITE", "DESCRIBE")
    ]  # fmt: skip
    path.write_text(json.dumps({"version": 1, "acls": acls}))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def traffic(gate) -> str:
    """Allowed and denied decisions and an ACL change, through the proxy; the topic's name."""
    orders = unique("orders")
    create_topics(gate, orders)  # admin: a super user
    assert produce(gate, "bob", [(orders, b"1"), (orders, b"2")]) == {orders: [None, None]}
    (err,) = produce(gate, "alice", [(orders, b"no")])[orders]
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    binding = AclBinding(ResourceType.TOPIC, orders, ResourcePatternType.LITERAL, "User:alice",
                         "*", AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    admin = AdminClient(gate.confluent("admin", log_level=3))
    admin.create_acls([binding])[binding].result(20)
    return orders


def decisions_of(events: list[dict]) -> set[tuple]:
    return {(e["principal"], e["decision"], e["resource_name"]) for e in events if "event" not in e}


@pytest.mark.parametrize("audit_format", ["aclgate", "cloudevents", "ocsf"])
def test_a_running_proxy_writes_its_audit_file_in_the_format(
    tansu,
    proxy_factory,
    users_file,  # noqa: F811
    tmp_path,
    audit_format,
):
    acl_file = tmp_path / "acls.json"
    write_acls(acl_file)
    gate = start_enforced(tansu, proxy_factory, users_file, tmp_path, acl_file,
                          audit_format=audit_format, proxy_name="gate-1")  # fmt: skip
    orders = traffic(gate)
    lines = gate.audit()  # flushed
    assert len(lines) == gate.proxy.server.audit.lines_written
    if audit_format == "aclgate":
        events = lines
        assert [list(e) for e in events if "event" not in e] == [EVENT_FIELDS] * (len(events) - 1)
    else:
        for line in lines:
            assert_valid(audit_format, line)
        if audit_format == "cloudevents":
            assert {line["source"] for line in lines} == {"aclgate://gate-1"}
            assert len({line["id"] for line in lines}) == len(lines)
            events = [line["data"] for line in lines]
        else:
            assert {line["class_uid"] for line in lines} == {6003}
            assert {line["metadata"]["product"]["name"] for line in lines} == {"aclgate"}
            events = [
                {
                    "principal": line["actor"]["user"]["uid"],
                    "decision": {1: "ALLOWED", 2: "DENIED"}.get(line.get("action_id")),
                    "resource_name": line["resources"][0]["name"],
                    **({"event": "acl_change"} if "event" in line["unmapped"] else {}),
                }
                for line in lines
            ]
    assert {
        ("User:bob", "ALLOWED", orders),
        ("User:alice", "DENIED", orders),
        ("User:admin", "ALLOWED", "kafka-cluster"),  # the ACL change's cluster check
    } <= decisions_of(events)
    (change,) = [e for e in events if "event" in e]
    assert change["principal"] == "User:admin"


def read_records(bootstrap: str, topic: str, want: int, timeout: float = 30) -> list:
    """(key, value, headers) of every record of `topic`: at least `want`, then a second more."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}", "logger": logging}
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        got: list = []

        def more() -> bool:
            for msg in consumer.consume(500, timeout=0.2):
                if msg.error() is None:
                    got.append((msg.key(), msg.value(), msg.headers()))
            return len(got) >= want

        wait_until(more, timeout=timeout, what=f"{want} records in {topic}")
        for _ in range(5):
            more()
        return got
    finally:
        consumer.close()


def test_the_topic_gets_the_files_cloudevents_with_their_content_type(
    tansu,
    proxy_factory,
    users_file,  # noqa: F811
    tmp_path,
):
    acl_file = tmp_path / "acls.json"
    write_acls(acl_file)
    topic = unique("aclgate-audit")
    gate = start_enforced(tansu, proxy_factory, users_file, tmp_path, acl_file,
                          audit_topic=topic, audit_window=1.0, audit_format="cloudevents")  # fmt: skip
    traffic(gate)
    file_lines = [json.dumps(e, separators=(",", ":")) for e in gate.audit()]
    server = gate.proxy.server
    wait_until(lambda: server.audit_sink.sent >= server.audit.lines_written, timeout=20)
    records = read_records(tansu.bootstrap, topic, len(file_lines))
    # the value is the file's line, byte for byte: the whole CloudEvent (structured mode)
    assert sorted(value.decode() for _, value, _ in records) == sorted(file_lines)
    for key, value, headers in records:
        line = json.loads(value)
        assert_valid("cloudevents", line)
        assert key == line["data"]["principal"].encode()  # the key stays the principal
        assert headers == [("content-type", b"application/cloudevents+json; charset=UTF-8")]
    assert {json.loads(v)["type"] for _, v, _ in records} == {
        "io.aclgate.authorization.decision",
        "io.aclgate.acl.change",
    }


def test_a_spool_of_any_format_is_sent_keyed_and_with_its_headers(tansu, tmp_path):
    """Lines spooled by an instance with another --audit-format (or before a change of it)
    are still keyed by their principal and carry their own format's headers."""
    convert = formats.formatter("cloudevents", "p")
    assert convert is not None
    lines = [
        json.dumps(line, separators=(",", ":")) + "\n"
        for line in (event(principal="User:a"), convert(event(principal="User:b")),
                     formats.ocsf(event(principal="User:c")), formats.ocsf(acl_change()))
    ]  # fmt: skip
    spool = tmp_path / "spool"
    held = AuditSpool(spool, max_bytes=1 << 20)
    assert held.append(lines) == 0
    held.sync()
    held.close()
    topic = unique("aclgate-audit")
    sink = KafkaAuditSink(AuditTopicSettings(tansu.bootstrap, topic, spool))
    try:
        wait_until(lambda: sink.sent == 4, timeout=30, what="the spool sent")
    finally:
        sink.close()
    records = read_records(tansu.bootstrap, topic, 4)
    got = {key: (value.decode() + "\n", headers) for key, value, headers in records}
    assert got == {
        b"User:a": (lines[0], None),
        b"User:b": (lines[1], [("content-type", b"application/cloudevents+json; charset=UTF-8")]),
        b"User:c": (lines[2], None),
        b"User:admin": (lines[3], None),
    }
    assert sink.dropped["corrupt"] == 0
