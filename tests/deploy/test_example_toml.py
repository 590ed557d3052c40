"""examples/aclgate.toml served for real: the production SASL_SSL example, changed only where a
deployment must change it, in front of an Apache Kafka with a SASL_SSL (SCRAM) listener, with a
real client through it.

The example is read at test time and rewritten key by key (a key the example no longer has
fails the test, and the parsed result may differ from the example in those keys only):
`upstream` (the test's Kafka), `advertised_host` (127.0.0.1, where the client finds the
published ports), `broker_ports` (a free block; a container publishes it under the same
numbers, since clients are told those ports) and, when it runs as a plain process, `listen`'s
and `metrics_listen`'s ports and the /etc/aclgate and /var/lib/aclgate paths (moved under the
test's temporary directory). Everything else is the example's: SASL_SSL with SCRAM-SHA-512
and its users file, the TLS files, upstream SASL_SSL SCRAM with a CA file and a password
file, the kafka ACL store with its transactional id, the audit topic with its spool, the super
user, `workers = "auto"`.

The files the example names are made as a new user would: the listener's certificate with
`aclgate certs init`/`aclgate certs server`, the users file with `aclgate users add
--password-stdin` (the super user of the example), the upstream password file, and the
cluster's CA (the test Kafka's, tests/kafka/cluster.py). Kafka (tests/kafka/cluster.py, as
bench/throughput.py --tls starts it) has one SASL_SSL listener with the example's upstream
mechanism, the SCRAM user the example names as aclgate's upstream identity, and
StandardAuthorizer with that user as a super user.

Preferably the image of deploy/oci/build.py runs it (the session's image and podman,
tests/deploy/conftest.py), as a container with its own entry point and command, the files
mounted at the example's /etc/aclgate paths (owned by the image's user, keys 0600), and the
container reaching Kafka on the host's address as containers see it. Where no container starts
(or the image cannot be built, outside CI), `aclgate serve --config` runs as a plain process
instead; the test prints which ran.

Then, through the proxy's listener, as the super user over SASL_SSL SCRAM-SHA-512 with the
dev CA (confluent-kafka): a topic is created, messages produced and consumed back, and an ACL
created and listed (the kafka ACL store's transactional write). /readyz answers 200; read
directly from Kafka, the ACL topic holds that ACL and the audit topic the client's decisions.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.oci import Podman, http_status, say
from tests.deploy.tools import REPO
from tests.fixtures.kafka import require_kafka
from tests.fixtures.ports import free_port_block
from tests.fixtures.wait import wait_until
from tests.kafka.cluster import KafkaCluster, KafkaStartError

WHO = "test_example_toml"
EXAMPLE = REPO / "examples" / "aclgate.toml"
#: the directories of the example's files, and where the test puts them
ETC, VAR = "/etc/aclgate", "/var/lib/aclgate"
#: the settings naming a file the deployment provides (under ETC)
SECRET_FILES = ("ssl_keyfile", "users_file", "upstream_sasl_password_file")
FILES = ("ssl_certfile", "upstream_ssl_cafile", *SECRET_FILES)
#: broker ports given to the proxy (the test's Kafka has one broker, id 1)
BROKER_PORTS = 4

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _set(text: str, key: str, value: Any) -> str:
    """`key = value` in place of the example's one line for `key` (TOML: json's strings and
    lists of strings are TOML's too)."""
    line = re.compile(rf"^{re.escape(key)}\s*=.*$", re.MULTILINE)
    assert len(line.findall(text)) == 1, f"examples/aclgate.toml has no one `{key} = ` line"
    return line.sub(lambda _: f"{key} = {json.dumps(value)}", text)


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def _with_port(address: str, port: int) -> str:
    return f"{address.rsplit(':', 1)[0]}:{port}"


def _run(*args: str, stdin: str | None = None) -> None:
    """An `aclgate` command, as a new user types it."""
    done = subprocess.run(
        [sys.executable, "-m", "aclgate", *args], input=stdin, capture_output=True, text=True,
        timeout=60, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, f"aclgate {' '.join(args)}: {done.stdout}{done.stderr}"


@dataclass
class Deployment:
    """What the test made: the settings served (as the proxy reads them), where the files the
    example names are on this machine, and the client's side."""

    settings: dict[str, Any]
    root: Path  # the host directory holding the example's /etc/aclgate files
    ca: Path  # the dev CA the listener's certificate is signed by
    admin: str  # the super user's name and password
    password: str


@dataclass
class Served:
    """The running proxy's log: `read()` while it runs, `final` once it stopped cleanly."""

    read: Callable[[], str]
    final: str = ""


def _kafka(host: str, example: dict[str, Any], password: str, workdir: Path) -> KafkaCluster:
    """Apache Kafka with one SASL_SSL listener on `host`: the example's upstream mechanism, its
    upstream user (a super user of StandardAuthorizer) with `password`."""
    require_kafka()
    user = example["upstream_sasl_username"]
    cluster = KafkaCluster(
        listeners=(example["upstream_security_protocol"],),
        mechanisms=(example["upstream_sasl_mechanism"],),
        users={user: password},
        authorizer=True,
        super_users=(f"User:{user}",),
        host=host,
        workdir=workdir,
    )
    try:
        cluster.start()
    except KafkaStartError as exc:
        pytest.fail(f"Apache Kafka did not start: {exc}", pytrace=False)
    return cluster


def _deploy(
    example: dict[str, Any],
    text: str,
    kafka: KafkaCluster,
    upstream_password: str,
    tmp_path: Path,
    changes: dict[str, Any],
    *,
    files_at: Callable[[str], Path],
    owner: int | None,
) -> Deployment:
    """The rewritten TOML and every file it names, made with aclgate's own commands.
    `files_at` maps one of the example's paths to where that file goes on this machine."""
    upstream = kafka.listener(example["upstream_security_protocol"])
    assert upstream.ca_file is not None
    for key, value in changes.items():
        text = _set(text, key, value)
    settings = tomllib.loads(text)
    changed = {k for k in settings.keys() | example.keys() if settings.get(k) != example.get(k)}
    assert changed == set(changes), changed

    pki = tmp_path / "pki"
    _run("certs", "init", "--out", str(pki))
    _run("certs", "server", "--out", str(pki), "--dns", "localhost",
         "--ip", settings["advertised_host"])  # fmt: skip
    (super_user,) = example["super_user"]
    admin, admin_password = super_user.removeprefix("User:"), uuid.uuid4().hex
    made = {
        "ssl_certfile": (pki / "server.crt").read_bytes(),
        "ssl_keyfile": (pki / "server.key").read_bytes(),
        "upstream_ssl_cafile": upstream.ca_file.read_bytes(),
        "upstream_sasl_password_file": f"{upstream_password}\n".encode(),
    }
    for key in FILES:
        assert example[key].startswith(f"{ETC}/"), f"{key} = {example[key]} not under {ETC}"
        path = files_at(example[key])
        path.parent.mkdir(parents=True, exist_ok=True)
        if key == "users_file":
            _run("users", "add", admin, "--users-file", str(path), "--mechanism",
                 example["sasl_mechanisms"], "--password-stdin", stdin=admin_password + "\n")  # fmt: skip
        else:
            path.write_bytes(made[key])
        path.chmod(0o600 if key in SECRET_FILES else 0o644)
    toml = files_at(f"{ETC}/aclgate.toml")
    toml.write_text(text)
    root = files_at(ETC)
    if owner is not None:  # the files belong to the user the proxy runs as
        for path in [root, *root.rglob("*")]:
            os.chown(path, owner, owner)
    return Deployment(settings, root, pki / "ca.crt", admin, admin_password)


def test_the_example_toml_serves_sasl_ssl_clients_in_front_of_sasl_ssl_kafka(
    request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    example_text = EXAMPLE.read_text()
    example = tomllib.loads(example_text)
    began = time.monotonic()
    podman, why_not = _container_or_why_not(request)
    image_seconds = time.monotonic() - began  # 0 when test_oci_image.py built it first
    upstream_password = uuid.uuid4().hex
    host = podman.host_address if podman is not None else "127.0.0.1"
    began = time.monotonic()
    kafka = _kafka(host, example, upstream_password, tmp_path / "kafka")
    kafka_seconds = time.monotonic() - began
    try:
        ports = free_port_block(BROKER_PORTS + 2)
        listen, metrics = ports + BROKER_PORTS, ports + BROKER_PORTS + 1
        changes: dict[str, Any] = {
            "upstream": kafka.listener(example["upstream_security_protocol"]).bootstrap.split(","),
            "advertised_host": "127.0.0.1",
            "broker_ports": f"{ports}-{ports + BROKER_PORTS - 1}",
        }
        began = time.monotonic()
        if podman is not None:
            ran = f"container: {podman.describe()}"
            say(capsys, WHO, f"examples/aclgate.toml ran in the image as a {ran}")
            files = tmp_path / "etc-aclgate"
            deployment = _deploy(
                example, example_text, kafka, upstream_password, tmp_path, changes,
                files_at=lambda p: files / Path(p).relative_to(ETC), owner=_image_uid(request),
            )  # fmt: skip
            served = _in_a_container(podman, deployment, listen, metrics)
        else:
            ran = "process: aclgate serve --config"
            say(capsys, WHO, f"no container here ({why_not}): examples/aclgate.toml ran as a {ran}")
            for key, value in example.items():  # the example's paths, under tmp_path
                if isinstance(value, str) and value.startswith((ETC, VAR)):
                    changes[key] = str(tmp_path) + value
            changes["listen"] = _with_port(example["listen"], listen)
            changes["metrics_listen"] = _with_port(example["metrics_listen"], metrics)
            deployment = _deploy(
                example, example_text, kafka, upstream_password, tmp_path, changes,
                files_at=lambda p: Path(str(tmp_path) + p), owner=None,
            )  # fmt: skip
            served = _as_a_process(deployment, tmp_path)
        request.node.user_properties.append(("ran", ran))
        with served as proxy:
            ready_seconds = time.monotonic() - began
            began = time.monotonic()
            _use_it(deployment, kafka, listen, metrics, proxy.read)
            client_seconds = time.monotonic() - began
        workers = _check_log(proxy.final, deployment.settings)
        say(capsys, WHO, f"{workers} workers (workers = \"auto\"); the image and podman "
            f"{image_seconds:.1f} s, Kafka started in {kafka_seconds:.1f} s, aclgate ready in "
            f"{ready_seconds:.1f} s, the client's checks {client_seconds:.1f} s")  # fmt: skip
    finally:
        kafka.stop()


def _check_log(log: str, settings: dict[str, Any]) -> int:
    """What the proxy logged: every worker listening as the example says, serving broker 1 on
    its port of the range, and no error. Returns how many workers `auto` started."""
    assert "ERROR" not in log and "Traceback" not in log, log[-5000:]
    started = re.search(r"starting (\d+) workers", log)
    assert started, log[-5000:]
    workers = int(started[1])
    protocol = f"{settings['listener_security_protocol']} {settings['sasl_mechanisms']}"
    listening = f"listening on {settings['listen']} for clients ({protocol})"
    assert log.count(listening) == workers, log[-5000:]
    broker_1 = int(settings["broker_ports"].split("-")[0]) + 1
    assert log.count(f"broker 1 is served on port {broker_1}") == workers, log[-5000:]
    return workers


def _container_or_why_not(request: pytest.FixtureRequest) -> tuple[Podman | None, str]:
    """The session's podman when a container starts here; else None and why not (under CI a
    missing image or podman has already failed the test)."""
    try:
        podman: Podman = request.getfixturevalue("podman")
    except pytest.skip.Exception as exc:
        return None, str(exc)
    if podman.flags is None:
        return None, "; ".join(podman.failed)
    return podman, ""


def _image_uid(request: pytest.FixtureRequest) -> int:
    uid: int = request.getfixturevalue("image").uid
    return uid


@contextmanager
def _in_a_container(
    podman: Podman, deployment: Deployment, listen: int, metrics: int
) -> Iterator[Served]:
    """The image's entry point and command, the example's /etc/aclgate files mounted read-only
    at /etc/aclgate; its listen and metrics ports published on `listen` and `metrics`, its
    broker ports under their own numbers. Yields a function giving its logs; stopped after."""
    assert podman.flags is not None
    settings = deployment.settings
    first, last = settings["broker_ports"].split("-")
    name = f"aclgate-example-{uuid.uuid4().hex[:8]}"
    started = podman(
        "run", "--detach", "--name", name, *podman.flags,
        "--volume", f"{deployment.root}:{ETC}:ro",
        "--publish", f"127.0.0.1:{listen}:{_port(settings['listen'])}",
        "--publish", f"127.0.0.1:{metrics}:{_port(settings['metrics_listen'])}",
        "--publish", f"127.0.0.1:{first}-{last}:{first}-{last}",
        podman.image,
    )  # fmt: skip
    assert started.returncode == 0, f"{podman.describe()} found working, yet: {started.stderr}"

    def logs() -> str:
        done = podman("logs", name)
        return done.stdout + done.stderr

    try:
        _wait_ready(metrics, logs)
        # the image's own health check (it asks the image's metrics port) passes with the example
        checked = podman("healthcheck", "run", name, timeout=30)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        served = Served(logs)
        yield served
        stopped = podman("stop", "--time", "30", name, timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        served.final = logs()
        assert code == "0", served.final[-5000:]
    finally:
        podman("rm", "--force", name)


@contextmanager
def _as_a_process(deployment: Deployment, tmp_path: Path) -> Iterator[Served]:
    """`aclgate serve --config FILE` (this checkout's), stopped with SIGTERM after."""
    toml = deployment.root / "aclgate.toml"
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "aclgate", "serve", "--config", str(toml)],
            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
        )  # fmt: skip

    def logs() -> str:
        return log_path.read_text()

    try:
        _wait_ready(_port(deployment.settings["metrics_listen"]), logs)
        served = Served(logs)
        yield served
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        served.final = logs()
        assert code == 0, served.final[-5000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_ready(metrics: int, logs: Callable[[], str]) -> None:
    try:
        wait_until(lambda: http_status(f"http://127.0.0.1:{metrics}/readyz") == 200,
                   timeout=90, interval=0.5, what="/readyz 200")  # fmt: skip
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{logs()[-5000:]}") from None


def _use_it(
    deployment: Deployment, kafka: KafkaCluster, listen: int, metrics: int, logs: Callable[[], str]
) -> None:
    """A real client through the proxy, then what reached Kafka, read directly."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    settings = deployment.settings
    client = {
        "bootstrap.servers": f"127.0.0.1:{listen}",
        "security.protocol": settings["listener_security_protocol"],
        "sasl.mechanism": settings["sasl_mechanisms"],
        "sasl.username": deployment.admin,
        "sasl.password": deployment.password,
        "ssl.ca.location": str(deployment.ca),
    }
    topic = f"example-toml-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(client)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)

    sent = [f"message {i}".encode() for i in range(5)]
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer({**client, "acks": "all", "enable.idempotence": True})
    for value in sent:
        producer.produce(topic, value, on_delivery=delivered)
    assert producer.flush(30) == 0 and not failures, failures

    consumer = Consumer({**client, "group.id": f"{topic}-group", "auto.offset.reset": "earliest"})
    got: list[bytes | None] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert got == sent, logs()[-5000:]

    # an ACL through the proxy's Admin API: the kafka ACL store's transactional write
    grantee = f"User:reader-{topic}"
    acl = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, grantee, "*",
                     AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    admin.create_acls([acl])[acl].result(timeout=30)
    match = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, grantee, "*",
                             AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    assert admin.describe_acls(match).result(timeout=30) == [acl]
    assert http_status(f"http://127.0.0.1:{metrics}/readyz") == 200

    # directly from Kafka (its INTERNAL listener): the ACL topic and the audit topic
    topics = kafka.admin().list_topics(timeout=30).topics
    assert settings["acl_topic"] in topics, sorted(topics)
    acl_records = _read(kafka, settings["acl_topic"], lambda records: any(
        grantee.encode() in (k or b"") + (v or b"") for k, v in records))  # fmt: skip
    assert acl_records, f"no record naming {grantee} in {settings['acl_topic']}"
    if settings.get("audit_topic"):
        principal = f"User:{deployment.admin}".encode()
        audit = _read(kafka, settings["audit_topic"], lambda records: any(
            k == principal and topic.encode() in (v or b"") for k, v in records))  # fmt: skip
        assert audit, f"no audit record of {principal!r} on {topic} in {settings['audit_topic']}"


def _read(
    kafka: KafkaCluster,
    topic: str,
    done: Callable[[list[tuple[bytes | None, bytes | None]]], bool],
    timeout: float = 60,
) -> list[tuple[bytes | None, bytes | None]]:
    """The (committed) records of `topic` from its start until `done` says enough, or the
    timeout: (key, value) pairs."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": kafka.internal.bootstrap,
            "group.id": f"example-toml-check-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    records: list[tuple[bytes | None, bytes | None]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while not done(records) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                records.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return records if done(records) else []
