"""The Spark jobs read audit lines of every `--audit-format` (pipeline/formats.py; docs/audit.md,
"Formats"): the same decisions, recorded by the proxy's own writer in the aclgate, CloudEvents
and OCSF formats (and in a file mixing the three line by line), give the same report, the same
fields back, and the same rows of the stream's events/ table."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest

from aclgate.pipeline.report import ReportOptions, run_report
from aclgate.pipeline.sample_world import SUPER_USERS, api_fields, build_world
from aclgate.pipeline.spark import Progress
from tests.fixtures.decisions import decision_record
from tests.pipeline.helpers import write_acl_file

pytestmark = pytest.mark.spark

FORMATS = ("aclgate", "cloudevents", "ocsf")


class Clock:
    def __init__(self) -> None:
        self.now = 1_795_000_000.0

    def __call__(self) -> float:
        return self.now


def record(path: Path, audit_format: str, n: int = 3000) -> Path:
    """n decisions of the sample fleet (some sessions with groups, the first half in dry-run)
    and a few ACL changes, written by proxy/audit/log.py in `audit_format`, the same whatever
    the format (the same seed and clock)."""
    from aclgate.authz.authorizer import Authorizer
    from aclgate.authz.model import AclBinding, AclOperation, ResourceType
    from aclgate.proxy.audit.log import AuditLog

    acls, acts = build_world()
    authorizer = Authorizer(super_users=SUPER_USERS)
    bindings = [AclBinding.from_dict(a) for a in acls]
    authorizer.load(bindings)
    clock = Clock()
    log = AuditLog(path / "audit.jsonl", "aclgate-test", window=5.0, clock=clock,
                   format=audit_format)  # fmt: skip
    rng = random.Random(1)
    for i in range(n):
        a = rng.choice(acts)
        decision = authorizer.authorize(
            a.principal,
            a.host,
            AclOperation[a.operation],
            ResourceType[a.resource_type],
            a.resource_name,
        )
        key, version = api_fields(a.api)
        groups = frozenset({"Group:ops", "Group:eu"}) if i % 3 == 0 else frozenset()
        log.record(
            decision_record(
                decision, a.resource_name, a.principal, a.host, operation=a.operation,
                resource_type=a.resource_type, listener=a.listener, client_id=a.client_id,
                api_key=key, api_version=version, enforced=i >= n // 2 or decision.allowed,
                groups=groups,
            )
        )  # fmt: skip
        if i % 1000 == 999:
            log.record_acl_change("SASL_SSL", "User:admin", "10.0.0.9", "admin", "CreateAcls",
                                  30, "file", bindings[:2], [], None)  # fmt: skip
        clock.now += 0.05
        log.tick()
    log.close()
    return path / "audit.jsonl"


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, Path]:
    """The same decisions in each format, `mixed`: line i of the aclgate file in the format
    FORMATS[i % 3], and `reordered`: the aclgate lines with their fields in another order (not
    `schema_version` first: read by the general path of pipeline/formats.py, `parse_line`)."""
    from aclgate.proxy.audit.formats import formatter

    root = tmp_path_factory.mktemp("formats")
    out = {name: record(root / name, name) for name in FORMATS}
    convert = {name: formatter(name, "aclgate-test") for name in FORMATS}
    mixed = []
    for i, line in enumerate(out["aclgate"].read_text().splitlines()):
        to = convert[FORMATS[i % 3]]
        mixed.append(
            line if to is None else json.dumps(to(json.loads(line)), separators=(",", ":"))
        )
    (root / "mixed").mkdir()
    out["mixed"] = root / "mixed" / "audit.jsonl"
    out["mixed"].write_text("\n".join(mixed) + "\n")
    reordered = [
        json.dumps(json.loads(line), sort_keys=True)
        for line in out["aclgate"].read_text().splitlines()
    ]
    assert not any(line.startswith('{"schema_version"') for line in reordered)
    (root / "reordered").mkdir()
    out["reordered"] = root / "reordered" / "audit.jsonl"
    out["reordered"].write_text("\n".join(reordered) + "\n")
    return out


def test_the_files_are_of_their_format(logs):
    first = {name: json.loads(path.read_text().splitlines()[0]) for name, path in logs.items()}
    assert "schema_version" in first["aclgate"]
    assert first["cloudevents"]["specversion"] == "1.0"
    assert first["ocsf"]["class_uid"] == 6003
    lines = {name: len(path.read_text().splitlines()) for name, path in logs.items()}
    assert len(set(lines.values())) == 1  # one line per line, whatever the format


def report(spark, tmp_path: Path, audit: Path) -> tuple[dict, dict[str, list]]:
    """The report's summary (without what names the input files or the run) and its tables,
    each as sorted rows."""
    acls, _ = build_world()
    out = tmp_path / audit.parent.name
    opts = ReportOptions(
        audit=[str(audit)],
        out=str(out),
        acl_file=str(write_acl_file(tmp_path / "acls.json", acls)),
        super_users=list(SUPER_USERS),
    )
    summary = run_report(spark, opts, Progress("report", opts.stages(), io.StringIO()))
    summary.pop("generated_at")
    summary["inputs"].pop("files")
    tables = {
        table: sorted(
            json.dumps(row.asDict(recursive=True), sort_keys=True, default=str)
            for row in spark.read.parquet(str(out / table)).collect()
        )
        for table in ("access", "denied/parquet", "acl_usage")
    }
    return summary, tables


def test_the_report_is_the_same_in_every_format(spark, logs, tmp_path):
    summary, tables = report(spark, tmp_path, logs["aclgate"])
    assert summary["inputs"]["malformed"]["count"] == 0
    assert summary["inputs"]["other_events"] == 3  # the acl_change lines: counted, not read
    assert summary["events"] == 3000
    assert summary["decisions"]["DENIED"] > 0 and summary["denied_dry_run"] > 0
    assert all(tables.values())
    # (the mixed file: test_every_field_of_the_event_comes_back and the stream's test below)
    for name in ("cloudevents", "ocsf"):
        assert report(spark, tmp_path, logs[name]) == (summary, tables), name


def test_every_field_of_the_event_comes_back(spark, logs):
    """Every field of the aclgate event, `groups` included, from a line of any format
    (decision lines; an acl_change line is only told apart, by its `event`)."""
    from pyspark.sql import functions as F

    from aclgate.pipeline.reader import parse_json
    from aclgate.pipeline.schema import CORRUPT_COLUMN

    def fields(path: Path) -> list[dict]:
        text = spark.read.text(str(path))
        parsed = text.select(parse_json(F.col("value")).alias("j"))
        rows = parsed.select("j.*").collect()
        return [row.asDict(recursive=True) for row in rows]

    expected = [json.loads(line) for line in logs["aclgate"].read_text().splitlines()]
    assert any(e.get("groups") for e in expected)
    for name in ("cloudevents", "ocsf", "mixed", "reordered"):
        got = fields(logs[name])
        assert len(got) == len(expected)
        for back, original in zip(got, expected, strict=True):
            if original.get("event") == "acl_change":
                assert back["event"] == "acl_change" and back["principal"] == "User:admin"
                continue
            assert back == {**original, "event": None, CORRUPT_COLUMN: None}, name


def test_the_streams_events_table_is_the_same_in_every_format(spark, logs):
    """The `events` query of `aclgate stream` (pipeline/stream.py), on records shaped as the
    Kafka source gives them: the same rows, each an aclgate event, whatever the format."""
    from pyspark.sql import functions as F

    from aclgate.pipeline.stream import checked_records, event_records

    def rows(path: Path) -> list[str]:
        records = spark.read.text(str(path)).select(
            F.lit("audit").alias("topic"),
            F.lit(0).alias("partition"),
            F.monotonically_increasing_id().alias("offset"),
            F.lit(None).cast("timestamp").alias("timestamp"),
            F.col("value").cast("binary").alias("value"),
        )
        table = event_records(checked_records(records)).drop("kafka_offset")
        return sorted(
            json.dumps(r.asDict(recursive=True), sort_keys=True, default=str)
            for r in table.collect()
        )

    expected = rows(logs["aclgate"])
    assert len(expected) == len(logs["aclgate"].read_text().splitlines()) - 3  # no acl_change
    assert all(json.loads(r)["malformed"] is None for r in expected)
    assert any(json.loads(r)["groups"] for r in expected)
    for name in ("cloudevents", "ocsf", "mixed", "reordered"):
        assert rows(logs[name]) == expected, name


def test_a_broken_line_of_another_format_is_malformed_with_its_reason(spark, tmp_path):
    from aclgate.pipeline.inputs import expand_inputs
    from aclgate.pipeline.malformed import malformed_lines, malformed_sample
    from aclgate.pipeline.reader import line_stats, read_audit
    from aclgate.proxy.audit.formats import formatter, ocsf

    decision = {
        "schema_version": 1, "ts": "2026-11-21T12:00:00.000000Z", "ts_first": None,
        "count": 1, "proxy": "p", "listener": "PLAINTEXT", "principal": "User:a",
        "groups": [], "host": "10.0.0.1", "client_id": None, "api": "Fetch", "api_key": 1,
        "api_version": 13, "operation": "READ", "resource_type": "TOPIC",
        "resource_name": "t", "decision": "DENIED", "enforced": True,
        "rule": "DEFAULT_DENY", "acl": None,
    }  # fmt: skip
    cloudevent = formatter("cloudevents", "p")(decision)
    no_principal = {**cloudevent, "data": {k: v for k, v in decision.items() if k != "principal"}}
    no_version = ocsf(decision)
    del no_version["metadata"]["log_version"]
    unknown_action = {**ocsf(decision), "action_id": 99}
    lines = [cloudevent, no_principal, ocsf(decision), no_version, unknown_action]
    path = tmp_path / "audit.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    data = read_audit(spark, expand_inputs([str(path)]))
    try:
        stats = line_stats(data)
        assert (stats["valid"], stats["malformed"]) == (2, 3)
        reasons = {r["line"]: r["reason"] for r in malformed_sample(malformed_lines(data), 10)}
        assert reasons == {
            2: "missing principal",
            4: "missing schema_version",
            5: "missing decision",
        }
    finally:
        data.release()
