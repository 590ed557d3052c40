"""The four commands as users call them: help without Spark, exit codes, outputs."""

from __future__ import annotations

import csv
import json

import pytest

from aclgate.proxy.cli import main
from tests.pipeline.helpers import (
    CANDIDATE,
    aclgate,
    small_log,
    write_acl_file,
    write_jsonl,
)

COMMANDS = ("report", "advise", "whatif", "audit-sample")


def test_help_does_not_start_or_import_spark():
    code = (
        "import sys\nfrom proxy.cli import main\n"
        f"for name in {COMMANDS!r}:\n"
        "    try:\n        main([name, '--help'])\n    except SystemExit:\n        pass\n"
        "print('IMPORTED' if 'pyspark' in sys.modules else 'CLEAN')\n"
    )
    result = aclgate("--version")  # warms nothing; just proves the entry point works
    assert result.returncode == 0
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("CLEAN")
    for flag in ("--audit", "--since", "--master", "--candidate-acl-file", "--min-prefix-topics"):
        assert flag in done.stdout


@pytest.fixture
def audit(tmp_path):
    write_jsonl(tmp_path / "audit" / "a.jsonl", small_log())
    return tmp_path


@pytest.mark.spark
def test_whatif_command(spark, audit, capsys):
    out = audit / "whatif"
    candidate = write_acl_file(audit / "candidate.json", CANDIDATE)
    args = ["whatif", "--audit", str(audit / "audit"), "--candidate-acl-file", str(candidate)]
    args += ["--out", str(out), "--super-user", "User:admin", "--fail-on-break"]
    assert main(args) == 1  # alice would break
    printed = capsys.readouterr()
    assert "7 events /       2 request shapes would flip to DENIED" in printed.out
    assert "[whatif] 4/4 writing report.html" in printed.err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["to_denied"] == {"events": 7, "keys": 2}
    assert summary["to_allowed"] == {"events": 1, "keys": 1}
    assert summary["dry_run_still_denied"] == {"events": 0, "keys": 0}
    assert summary["unchanged"]["events"] == 7
    (part,) = (out / "to_denied").glob("part-*.csv")
    rows = list(csv.DictReader(part.read_text().splitlines()))
    assert {(r["principal"], r["operation"], r["count"]) for r in rows} == {
        ("User:alice", "READ", "6"),
        ("User:alice", "DESCRIBE", "1"),
    }
    assert rows[0]["client_ids"] == "client-1"
    assert "What-if" in (out / "report.html").read_text()
    assert spark.read.parquet(str(out / "decisions")).count() == 7


@pytest.mark.spark
def test_errors_are_messages_with_exit_status_2(spark, audit, capsys):
    bad_acls = audit / "bad.json"
    bad_acls.write_text('{"version": 1, "acls": [{"resource_type": "TOPIC"}]}')
    out = str(audit / "out")
    assert main(["report", "--audit", str(audit / "missing"), "--out", out]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert main(["report", "--audit", str(audit), "--out", out, "--acl-file", str(bad_acls)]) == 2
    assert "bad.json: acls[0]" in capsys.readouterr().err
    assert main(["report", "--audit", str(audit), "--out", out, "--conf", "nonsense"]) == 2
    assert "--conf expects key=value" in capsys.readouterr().err


@pytest.mark.spark
def test_advise_command_output_loads(spark, audit, capsys):
    out = audit / "advice.json"
    assert main(["advise", "--audit", str(audit / "audit"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "User:alice" in printed and "consumer" in printed
    entries = json.loads(out.read_text())["acls"]
    # alice: READ orders (DESCRIBE implied), READ alice-group; admin's super-user traffic too.
    assert {(e["principal"], e["operation"], e["resource_name"]) for e in entries} == {
        ("User:alice", "READ", "orders"),
        ("User:alice", "READ", "alice-group"),
        ("User:admin", "DESCRIBE", "kafka-cluster"),
    }


def test_sample_is_deterministic_and_gzips(tmp_path):
    for name in ("a", "b"):
        result = aclgate(
            "audit-sample", "--events", "500", "--out", str(tmp_path / name), "--files", "2",
            "--gzip", "--seed", "5", "--acls-out", str(tmp_path / f"{name}.json"),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    import gzip

    files = sorted((tmp_path / "a").iterdir())
    assert [f.name for f in files] == ["audit-00000.jsonl.gz", "audit-00001.jsonl.gz"]
    for f in files:
        assert gzip.decompress(f.read_bytes()) == gzip.decompress(
            (tmp_path / "b" / f.name).read_bytes()
        )
    lines = [json.loads(x) for f in files for x in gzip.decompress(f.read_bytes()).splitlines()]
    assert len(lines) == 500
    assert [x["ts"] for x in lines] == sorted(x["ts"] for x in lines)
    assert {x["decision"] for x in lines} == {"ALLOWED", "DENIED"}
    assert any(not x["enforced"] for x in lines) and any(x["count"] > 1 for x in lines)
    listed = aclgate("acls", "--acl-file", str(tmp_path / "a.json"), "--list")
    assert listed.returncode == 0 and "User:analytics" in listed.stdout


@pytest.mark.spark
def test_sample_decisions_are_authz_decisions(spark, tmp_path):
    """Replaying a sample against the policy it was written with flips nothing."""
    from aclgate.pipeline.acls import load_acls
    from aclgate.pipeline.evaluate import Policy
    from aclgate.pipeline.inputs import expand_inputs
    from aclgate.pipeline.reader import read_audit
    from aclgate.pipeline.whatif import compare

    result = aclgate(
        "audit-sample", "--events", "3000", "--out", str(tmp_path / "s.jsonl"),
        "--acls-out", str(tmp_path / "acls.json"), "--seed", "9",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    policy = Policy(load_acls(str(tmp_path / "acls.json")).text, ("User:admin",))
    data = read_audit(spark, expand_inputs([str(tmp_path / "s.jsonl")]))
    try:
        flips = {r["flip"] for r in compare(spark, data.events, policy).collect()}
    finally:
        data.release()
    assert flips <= {None, "dry_run_still_denied"}


def test_submit_entry_point_runs_from_a_checkout():
    """`spark-submit pipeline/submit.py` runs the file as a script: its imports must work."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "pipeline" / "submit.py"
    done = subprocess.run(
        [sys.executable, str(script), "whatif", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "--candidate-acl-file" in done.stdout
