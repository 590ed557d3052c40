"""Fixtures for the identity tests: a development PKI and a Java oracle.

The oracle (java/IdentityOracle.java, compiled on first use) answers with the JDK's
`X500Principal.getName()` and, when the Apache Kafka jars from tests/kafka/lib are present,
with Kafka's own SslPrincipalMapper and ScramFormatter: the reference implementations that
aclgate has to agree with byte for byte.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest

from aclgate.certs import pki

HERE = Path(__file__).parent
KAFKA_LIB = HERE.parent / "kafka" / "lib"


class JavaError(Exception):
    """The Java side threw; str() is "exception.Class: message"."""


class Oracle:
    def __init__(self, proc: subprocess.Popen[str], has_kafka: bool) -> None:
        self._proc = proc
        self.has_kafka = has_kafka

    def ask(self, op: str, *fields: str | bytes) -> str:
        enc = [base64.b64encode(f.encode() if isinstance(f, str) else f).decode() for f in fields]
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write("\t".join([op, *enc]) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline().rstrip("\n")
        if line.startswith("="):
            return base64.b64decode(line[1:]).decode()
        raise JavaError(line[1:])

    def require_kafka(self) -> None:
        if not self.has_kafka:
            pytest.skip("Apache Kafka jars not in tests/kafka/lib (run `make kafka-jars`)")


@pytest.fixture(scope="session")
def oracle(tmp_path_factory: pytest.TempPathFactory):
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("needs a JDK (javac and java)")
    jars = sorted(KAFKA_LIB.glob("kafka-clients-*.jar"))
    if jars:  # what Kafka's JWT validation needs besides kafka-clients
        jars += sorted(KAFKA_LIB.glob("jose4j-*.jar")) + sorted(KAFKA_LIB.glob("slf4j-api-*.jar"))
    classpath = [str(j) for j in jars]
    out = tmp_path_factory.mktemp("oracle")
    cmd = ["javac", "-d", str(out), str(HERE / "java" / "IdentityOracle.java")]
    if classpath:
        cmd[1:1] = ["-cp", ":".join(classpath)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    else:
        # Without Kafka on the classpath only the JDK-backed "dn" operation is usable, so
        # compile a copy with the Kafka calls stripped out.
        src = (HERE / "java" / "IdentityOracle.java").read_text()
        lines = [ln for ln in src.splitlines() if "org.apache.kafka" not in ln]
        stripped = out / "src" / "IdentityOracle.java"
        stripped.parent.mkdir()
        body = "\n".join(_drop_kafka_cases(lines))
        body = (
            body[: body.index("    static javax.security.sasl.SaslServer scramServer;")] + "}\n"
        )  # drop the Kafka-only helper
        stripped.write_text(body)
        subprocess.run(
            ["javac", "-d", str(out), str(stripped)], check=True, capture_output=True, timeout=120
        )
    proc = subprocess.Popen(
        ["java", "-cp", ":".join([str(out), *classpath]), "IdentityOracle"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        encoding="utf-8",
    )
    try:
        yield Oracle(proc, bool(classpath))
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


def _drop_kafka_cases(lines: list[str]) -> list[str]:
    out, skipping = [], False
    for ln in lines:
        stripped = ln.strip()
        if stripped.startswith(
            ('case "map"', 'case "rules"', 'case "scram"', 'case "jwt"', 'case "ssrv"')
        ):
            skipping = True
            continue
        if skipping and stripped.startswith("default:"):
            skipping = False
        if not skipping:
            out.append(ln)
    return out


@pytest.fixture(scope="session")
def pki_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA with `server` (localhost, 127.0.0.1, ::1), `alice` (valid) and `expired` certs."""
    d = tmp_path_factory.mktemp("pki")
    pki.create_ca(d)
    pki.issue_server(d, dns=["localhost"], ips=["127.0.0.1", "::1"])
    pki.issue_client(d, "alice", "CN=alice,OU=eng,O=example")
    pki.issue_client(d, "expired", "CN=old,OU=eng,O=example", validity="expired")
    return d
