"""The pom resolves to the pinned Apache Kafka, and `make jars` is cached (no network)."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import zipfile

import pytest

from tests.fixtures.kafka import require_kafka
from tests.kafka.cluster import KAFKA_DIR, LIB_DIR, POM, kafka_version

pytestmark = pytest.mark.kafka


def test_pinned_version_is_the_one_in_lib():
    require_kafka()
    version = kafka_version()  # the pom's, or KAFKA_VERSION's (docs/kafka.md)
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    jars = {p.name for p in LIB_DIR.glob("*.jar")}
    for artifact in ("kafka_2.13", "kafka-tools", "kafka-clients", "kafka-server"):
        assert f"{artifact}-{version}.jar" in jars
    # one Kafka version only, and it is the one the clients jar reports at runtime
    assert {j for j in jars if j.startswith("kafka_2.13-")} == {f"kafka_2.13-{version}.jar"}
    with zipfile.ZipFile(LIB_DIR / f"kafka-clients-{version}.jar") as z:
        props = z.read("kafka/kafka-version.properties").decode()
    assert f"version={version}" in props.splitlines()
    # an SLF4J binding is there, so the broker logs through log4j2 and our config
    assert any(j.startswith("log4j-slf4j") for j in jars)


def test_make_jars_is_a_no_op_when_lib_matches_the_pom():
    require_kafka()
    stamp = (LIB_DIR / ".pom.sha256").read_text().strip()
    assert stamp == hashlib.sha256(POM.read_bytes()).hexdigest()
    # MVN=false: any attempt to run Maven would fail, so success means nothing was fetched
    proc = subprocess.run(
        ["make", "-s", "-C", str(KAFKA_DIR), "jars", "MVN=false"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == proc.stderr == ""


def test_make_jars_refetches_for_a_changed_pom_and_reports_maven_errors(tmp_path):
    require_kafka()
    shutil.copy(KAFKA_DIR / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pom.xml").write_text(POM.read_text() + "<!-- changed -->\n")
    fake_mvn = tmp_path / "mvn"
    fake_mvn.write_text("#!/bin/sh\necho '[ERROR] Could not resolve dependencies (fake)'\nexit 1\n")
    fake_mvn.chmod(0o755)
    proc = subprocess.run(
        ["make", "-s", "-C", str(tmp_path), "jars", f"MVN={fake_mvn}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0
    assert "Could not resolve dependencies (fake)" in proc.stderr
    assert not (tmp_path / "lib").exists()
