"""Start real Apache Kafka (KRaft) clusters from the jars in tests/kafka/lib.

    from tests.kafka.cluster import KafkaCluster

    with KafkaCluster(nodes=3) as kafka:             # node ids 1, 2, 3
        kafka.bootstrap                              # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        kafka.create_topic("t", partitions=3, replication_factor=3)

    with KafkaCluster(listeners=("SASL_PLAINTEXT", "SSL", "SASL_SSL")) as kafka:
        lst = kafka.listener("SASL_SSL")
        Producer(lst.confluent_config(user="alice", mechanism="SCRAM-SHA-512"))

    with KafkaCluster(listeners=("SASL_PLAINTEXT",), authorizer=True) as kafka:
        kafka.acls.add("User:bob", "READ", "TOPIC", "orders")   # waits until it is effective

Topology. Node 1 is a combined broker+controller and the only voter of a static KRaft quorum
(`controllers=` raises the voter count: nodes 1..controllers are combined); the other nodes are
brokers only. This starts fastest on 2 cores (no election among voters).

Listeners. Every node has an `INTERNAL` PLAINTEXT listener (inter-broker traffic, the start-up
probe, admin helpers; on an authorizing cluster its ANONYMOUS principal is a super user) and,
on controllers, a `CONTROLLER` listener. The client listeners are named after their security
protocol: `PLAINTEXT`, `SASL_PLAINTEXT`, `SSL`, `SASL_SSL`. SASL listeners accept the
`mechanisms` given (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN by default) for every user in
`users`; SCRAM credentials are written at format time (`kafka-storage format --add-scram`).
SSL listeners use a throwaway CA and server certificate (PEM) made in the work directory;
clients trust `Listener.ca_file`.

Start-up is formatted storage (random cluster id), one JVM per node with a small heap, then a
Kafka-protocol probe on each node: ApiVersions, then Metadata listing all N brokers. Each node
logs to `<workdir>/node-<id>/server.log`; when start fails, the tail of every log is in the
exception. `stop()` sends SIGTERM (brokers first, then controllers), waits, then kills.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KAFKA_DIR = Path(__file__).resolve().parent
POM = KAFKA_DIR / "pom.xml"
BROKER_LOG4J = KAFKA_DIR / "log4j2-broker.properties"
TOOLS_LOG4J = KAFKA_DIR / "log4j2-tools.properties"

KAFKA_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

# Small heaps; SerialGC and C1-only start noticeably faster on 2 shared cores (docs/kafka.md).
BROKER_JVM_OPTS: tuple[str, ...] = (
    "-Xmx512m",
    "-Xms256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
# Short-lived JVMs: kafka-storage here, the command-line tools in tools.py.
TOOL_JVM_OPTS: tuple[str, ...] = (
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
)

#: server.properties by Kafka major version, on top of the defaults: Kafka 3.9 serves the
#: KIP-848 consumer protocol (`group.protocol=consumer`) only as a preview, when its
#: rebalance protocols list it; 4.x serves it by default. (Kafka 3.9 ignores, with a
#: warning, the share-group settings it does not know.)
VERSION_CONFIG: Mapping[int, Mapping[str, str]] = {
    3: {"group.coordinator.rebalance.protocols": "classic,consumer"},
}

CLIENT_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
DEFAULT_USERS: Mapping[str, str] = {
    "admin": "admin-secret",
    "alice": "alice-secret",
    "bob": "bob-secret",
    "charlie": "charlie-secret",
}
INTERNAL = "INTERNAL"
CONTROLLER = "CONTROLLER"


class KafkaStartError(RuntimeError):
    """A Kafka node did not come up; the message carries the tail of every node's log."""


# --------------------------------------------------------------------------- toolchain


def pom_kafka_version() -> str:
    """The Apache Kafka version pinned in tests/kafka/pom.xml (`<kafka.version>`)."""
    m = re.search(r"<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>", POM.read_text())
    if not m:  # pragma: no cover - the pom is ours
        raise RuntimeError(f"no <kafka.version> in {POM}")
    return m.group(1)


def kafka_version() -> str:
    """The Apache Kafka version the suite runs: $KAFKA_VERSION (e.g. 3.9.2, the version
    matrix of docs/kafka.md), else the pom's."""
    version = os.environ.get("KAFKA_VERSION", "").strip() or pom_kafka_version()
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ValueError(f"KAFKA_VERSION={version!r} is not a release number such as 3.9.2")
    return version


def kafka_major() -> int:
    return int(kafka_version().split(".")[0])


def lib_dir() -> Path:
    """The jars of `kafka_version()`: lib/ for the pom's version, lib-<version>/ otherwise
    (`make -C tests/kafka jars KAFKA_VERSION=...` fills it)."""
    version = kafka_version()
    return KAFKA_DIR / ("lib" if version == pom_kafka_version() else f"lib-{version}")


LIB_DIR = lib_dir()


def classpath() -> str:
    """`java -cp` argument for every jar in tests/kafka/lib (the JVM expands the wildcard)."""
    return str(LIB_DIR / "*")


def jars_present() -> bool:
    return (LIB_DIR / f"kafka_2.13-{kafka_version()}.jar").is_file() and (
        LIB_DIR / f"kafka-tools-{kafka_version()}.jar"
    ).is_file()


def ensure_jars(timeout: float = 600) -> str | None:
    """Fetch the jars with `make -C tests/kafka jars` if needed and possible.

    Returns None when Java and the jars are ready, else a sentence saying what is missing.
    """
    if shutil.which("java") is None:
        return "Java is not installed (`java` not on PATH); Apache Kafka needs Java 17+"
    if not jars_present():
        if shutil.which("mvn") is None or shutil.which("make") is None:
            return (
                f"the Apache Kafka {kafka_version()} jars are missing from {LIB_DIR} and Maven "
                "is not installed to fetch them (`make -C tests/kafka jars`)"
            )
        proc = subprocess.run(
            ["make", "-s", "-C", str(KAFKA_DIR), "jars", f"KAFKA_VERSION={kafka_version()}"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0 or not jars_present():
            return f"`make -C tests/kafka jars` failed:\n{proc.stdout}{proc.stderr}"
    return None


def java_command(main: str, *args: str, jvm_opts: Sequence[str] = TOOL_JVM_OPTS) -> list[str]:
    return ["java", *jvm_opts, "-cp", classpath(), main, *args]


def _pdeathsig_setter():
    """A preexec_fn that makes the child get SIGTERM when its parent dies (Linux), or None.

    libc is looked up here, in the parent: the child of a multi-threaded process (librdkafka
    runs threads) must not dlopen or allocate between fork and exec.
    """
    try:
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - not glibc Linux
        return None
    args = (ctypes.c_int(1), ctypes.c_ulong(signal.SIGTERM))  # PR_SET_PDEATHSIG

    def set_pdeathsig() -> None:  # pragma: no cover - runs in the child
        prctl(*args)

    return set_pdeathsig


# --------------------------------------------------------------------------- wire probe


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct free TCP ports (all held open at once, so no duplicates)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _request(host: str, port: int, api_key: int, version: int, body: bytes, timeout: float):
    header = struct.pack(">hhih", api_key, version, 7, 5) + b"probe"
    frame = header + body
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        data = _recv_exact(s, size)
    if struct.unpack(">i", data[:4])[0] != 7:
        raise OSError("correlation id mismatch")
    return data[4:]


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return bytes(buf)


def api_versions_ok(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a PLAINTEXT Kafka listener answers ApiVersions v0 with error code 0."""
    try:
        return struct.unpack(">h", _request(host, port, 18, 0, b"", timeout)[:2])[0] == 0
    except (OSError, struct.error):
        return False


def metadata_cluster_id(host: str, port: int, timeout: float = 2.0) -> str | None:
    """The cluster id Metadata v2 (no topics) gives on a PLAINTEXT listener. The start-up
    probe compares it with the id the cluster was formatted with: ports are picked free and
    bound later by the JVM, and in between another process of the suite (another worker's
    proxy, in front of another cluster, answers Metadata with broker 1 too) can hold one."""
    data = _request(host, port, 3, 2, struct.pack(">i", 0), timeout)
    (count,) = struct.unpack_from(">i", data, 0)
    pos = 4
    for _ in range(count):  # node_id, host, port, rack
        (hlen,) = struct.unpack_from(">h", data, pos + 4)
        pos += 6 + hlen + 4
        (rlen,) = struct.unpack_from(">h", data, pos)
        pos += 2 + max(rlen, 0)
    (clen,) = struct.unpack_from(">h", data, pos)
    return None if clen < 0 else data[pos + 2 : pos + 2 + clen].decode()


def metadata_brokers(host: str, port: int, timeout: float = 2.0) -> dict[int, tuple[str, int]]:
    """Brokers listed by Metadata v1 (no topics) on a PLAINTEXT listener: {node_id: (host, port)}."""
    data = _request(host, port, 3, 1, struct.pack(">i", 0), timeout)
    (count,) = struct.unpack_from(">i", data, 0)
    pos, brokers = 4, {}
    for _ in range(count):
        node_id, hlen = struct.unpack_from(">ih", data, pos)
        pos += 6
        bhost = data[pos : pos + hlen].decode()
        pos += hlen
        (bport, rlen) = struct.unpack_from(">ih", data, pos)
        pos += 6 + max(rlen, 0)
        brokers[node_id] = (bhost, bport)
    return brokers


# --------------------------------------------------------------------------- listeners


@dataclass(frozen=True)
class Listener:
    """One client-facing listener of a cluster, with everything a client needs to use it."""

    name: str  # listener name in server.properties, e.g. "SASL_SSL" or "INTERNAL"
    security_protocol: str  # PLAINTEXT | SASL_PLAINTEXT | SSL | SASL_SSL
    addresses: tuple[tuple[int, str, int], ...]  # (node_id, host, port), ordered by node id
    mechanisms: tuple[str, ...] = ()  # SASL mechanisms accepted (empty when not SASL)
    users: Mapping[str, str] = field(default_factory=dict)  # user -> password
    ca_file: Path | None = None  # PEM CA to trust (SSL / SASL_SSL)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{h}:{p}" for _, h, p in self.addresses)

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.security_protocol.endswith("SSL")

    def port(self, node_id: int) -> int:
        return next(p for n, _, p in self.addresses if n == node_id)

    def address(self, node_id: int) -> str:
        return next(f"{h}:{p}" for n, h, p in self.addresses if n == node_id)

    def credentials(
        self, user: str | None, mechanism: str | None = None, password: str | None = None
    ) -> tuple[str, str, str] | None:
        """(mechanism, user, password) for a SASL listener, None otherwise."""
        if not self.sasl:
            return None
        if user is None:
            raise ValueError(
                f"listener {self.name} is SASL: pass user= (one of {list(self.users)})"
            )
        mechanism = mechanism or self.mechanisms[0]
        if mechanism not in self.mechanisms:
            raise ValueError(f"{mechanism} is not enabled on {self.name}: {self.mechanisms}")
        if password is None:
            password = self.users[user]
        return mechanism, user, password

    def confluent_config(
        self,
        user: str | None = None,
        mechanism: str | None = None,
        password: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """Config dict for confluent-kafka's Producer/Consumer/AdminClient."""
        cfg: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": self.security_protocol,
        }
        creds = self.credentials(user, mechanism, password)
        if creds:
            cfg.update({"sasl.mechanism": creds[0], "sasl.username": creds[1]})
            cfg["sasl.password"] = creds[2]
        if self.tls:
            cfg["ssl.ca.location"] = str(self.ca_file)
        cfg.update(extra)
        return cfg

    def kafka_python_config(
        self,
        user: str | None = None,
        mechanism: str | None = None,
        password: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """Keyword arguments for kafka-python's KafkaProducer/KafkaConsumer/KafkaAdminClient."""
        cfg: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": self.security_protocol,
        }
        creds = self.credentials(user, mechanism, password)
        if creds:
            cfg.update({"sasl_mechanism": creds[0], "sasl_plain_username": creds[1]})
            cfg["sasl_plain_password"] = creds[2]
        if self.tls:
            cfg["ssl_cafile"] = str(self.ca_file)
        cfg.update(extra)
        return cfg

    def java_properties(
        self,
        user: str | None = None,
        mechanism: str | None = None,
        password: str | None = None,
        **extra: str,
    ) -> dict[str, str]:
        """Java client properties (for a tool's --command-config); no bootstrap.servers."""
        props = {"security.protocol": self.security_protocol}
        creds = self.credentials(user, mechanism, password)
        if creds:
            mech, u, p = creds
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if mech == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            props["sasl.mechanism"] = mech
            props["sasl.jaas.config"] = f'{module} required username="{u}" password="{p}";'
        if self.tls:
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.location"] = str(self.ca_file)
        props.update(extra)
        return props

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "security_protocol": self.security_protocol,
            "addresses": [list(a) for a in self.addresses],
            "mechanisms": list(self.mechanisms),
            "users": dict(self.users),
            "ca_file": str(self.ca_file) if self.ca_file else None,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Listener:
        return cls(
            name=d["name"],
            security_protocol=d["security_protocol"],
            addresses=tuple((int(n), h, int(p)) for n, h, p in d["addresses"]),
            mechanisms=tuple(d["mechanisms"]),
            users=dict(d["users"]),
            ca_file=Path(d["ca_file"]) if d["ca_file"] else None,
        )


def write_properties(path: Path, props: Mapping[str, Any]) -> Path:
    """Write a Java .properties file (values escaped for backslashes and newlines)."""
    lines = []
    for k, v in props.items():
        v = str(v).replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"{k}={v}")
    path.write_text("\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------- TLS material


def make_tls_material(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A throwaway CA and a server certificate for localhost/127.0.0.1/`host`.

    Returns (ca.pem, server.pem); server.pem holds the PKCS#8 key and the certificate chain,
    the layout Kafka's `ssl.keystore.type=PEM` reads.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    validity = (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=30))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aclgate test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity[0])
        .not_valid_after(validity[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    try:
        if host != "127.0.0.1":
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        sans.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity[0])
        .not_valid_after(validity[1])
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    pem = serialization.Encoding.PEM
    ca_path = directory / "ca.pem"
    ca_path.write_bytes(ca_cert.public_bytes(pem))
    server_path = directory / "server.pem"
    server_path.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        + cert.public_bytes(pem)
        + ca_cert.public_bytes(pem)
    )
    server_path.chmod(0o600)
    return ca_path, server_path


def random_cluster_id() -> str:
    """A Kafka Uuid string (base64url, no padding) that does not start with '-'."""
    import base64

    while True:
        s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not s.startswith("-"):
            return s


# --------------------------------------------------------------------------- the cluster


@dataclass
class _Node:
    node_id: int
    roles: tuple[str, ...]
    directory: Path
    process: subprocess.Popen | None = None
    pid: int | None = None

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return self.pid is not None and _pid_alive(self.pid)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is not alive
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False
    return True


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (Linux /proc), 0 if unknown."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class KafkaCluster:
    """N KRaft nodes on free loopback ports; see the module docstring.

    Arguments:
        nodes: number of nodes (ids 1..nodes).
        listeners: client listeners, by security protocol (an INTERNAL PLAINTEXT listener is
            always added).
        mechanisms: SASL mechanisms enabled on SASL listeners.
        users: SASL users (PLAIN and every enabled SCRAM mechanism), user -> password.
        authorizer: install StandardAuthorizer; `super_users` are added to
            `User:ANONYMOUS` (which the INTERNAL and CONTROLLER listeners authenticate as).
        controllers: how many of the first nodes are combined broker+controller voters.
        broker_config: extra/overriding server.properties entries for every node.
        workdir: where node directories go (default: a new temp dir, removed on stop()
            unless `keep=True`).
        base_port: fixed ports instead of free random ones: node i's client listeners get
            base_port + 10*(i-1) + 0.., then INTERNAL; its CONTROLLER listener gets +9.
        detach: the JVMs outlive this Python process (for tests.kafka.local).
    """

    def __init__(
        self,
        nodes: int = 1,
        listeners: Iterable[str] = ("PLAINTEXT",),
        *,
        mechanisms: Iterable[str] = SASL_MECHANISMS,
        users: Mapping[str, str] = DEFAULT_USERS,
        authorizer: bool = False,
        super_users: Iterable[str] = ("User:admin",),
        controllers: int = 1,
        broker_config: Mapping[str, Any] | None = None,
        workdir: str | Path | None = None,
        keep: bool = False,
        host: str = "127.0.0.1",
        base_port: int | None = None,
        start_timeout: float = 120.0,
        jvm_opts: Sequence[str] = BROKER_JVM_OPTS,
        detach: bool = False,
    ) -> None:
        self.listener_protocols = tuple(dict.fromkeys(listeners))
        for p in self.listener_protocols:
            if p not in CLIENT_PROTOCOLS:
                raise ValueError(f"unknown listener {p!r}; use {CLIENT_PROTOCOLS}")
        if not 1 <= controllers <= nodes:
            raise ValueError("controllers must be between 1 and nodes")
        self.node_count = nodes
        self.controller_count = controllers
        self.mechanisms = tuple(mechanisms)
        self.users = dict(users)
        self.authorizer = authorizer
        self.super_users = ("User:ANONYMOUS", *super_users) if authorizer else ()
        self.broker_config = dict(broker_config or {})
        self.host = host
        self.base_port = base_port
        self.start_timeout = start_timeout
        self.jvm_opts = tuple(jvm_opts)
        self.detach = detach
        self._workdir_arg = Path(workdir) if workdir else None
        self._keep = keep or workdir is not None
        self.workdir: Path | None = None
        self.cluster_id: str | None = None
        self.nodes: list[_Node] = []
        self.listeners: dict[str, Listener] = {}
        self.ca_file: Path | None = None
        self.start_seconds: float | None = None
        self._acls: Any = None

    # ------------------------------------------------------------------ public views

    @property
    def node_ids(self) -> list[int]:
        return [n.node_id for n in self.nodes] or list(range(1, self.node_count + 1))

    @property
    def internal(self) -> Listener:
        """The INTERNAL PLAINTEXT listener (super user on an authorizing cluster)."""
        return self.listeners[INTERNAL]

    @property
    def probe_listener(self) -> Listener:
        """The PLAINTEXT listener the start-up probe talks to: INTERNAL (a subclass that
        secures INTERNAL with SASL probes a PLAINTEXT client listener instead)."""
        return self.internal

    @property
    def client_listener(self) -> Listener:
        """The first client listener given in `listeners=`."""
        return self.listeners[self.listener_protocols[0]]

    @property
    def bootstrap(self) -> str:
        """Bootstrap of the first client listener."""
        return self.client_listener.bootstrap

    def listener(self, name: str) -> Listener:
        return self.listeners[name]

    @property
    def log_paths(self) -> dict[int, Path]:
        return {n.node_id: n.log_path for n in self.nodes}

    @property
    def pids(self) -> dict[int, int]:
        return {n.node_id: n.pid for n in self.nodes if n.pid}

    def rss(self) -> dict[int, int]:
        """Resident memory of each node's JVM in bytes."""
        return {n.node_id: rss_bytes(n.pid) for n in self.nodes if n.pid}

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> KafkaCluster:
        problem = ensure_jars()
        if problem:
            raise KafkaStartError(problem)
        if self._workdir_arg:
            self._workdir_arg.mkdir(parents=True, exist_ok=True)
            self.workdir = self._workdir_arg
        else:
            self.workdir = Path(tempfile.mkdtemp(prefix="aclgate-kafka-"))
        t0 = time.monotonic()
        last_error: KafkaStartError | None = None
        for attempt in range(3):
            try:
                self._start_once(attempt)
                self.start_seconds = time.monotonic() - t0
                return self
            except KafkaStartError as exc:
                last_error = exc
                port_clash = "Address already in use" in str(exc) and not self.base_port
                self._stop_processes()
                if not port_clash:
                    break
        self._cleanup_workdir()
        assert last_error is not None
        raise last_error

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM brokers, then controllers; wait; kill what is left; remove the temp dir."""
        if self._acls is not None:
            self._acls.close()  # its Admin clients would keep reconnecting (and logging)
            self._acls = None
        self._stop_processes(timeout)
        self._cleanup_workdir()

    # ------------------------------------------------------------------ internals

    def _start_once(self, attempt: int) -> None:
        assert self.workdir is not None
        run_dir = self.workdir if attempt == 0 else self.workdir / f"retry-{attempt}"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = random_cluster_id()
        self.nodes = [
            _Node(
                node_id=i,
                roles=("broker", "controller") if i <= self.controller_count else ("broker",),
                directory=run_dir / f"node-{i}",
            )
            for i in range(1, self.node_count + 1)
        ]
        for n in self.nodes:
            n.directory.mkdir(parents=True, exist_ok=True)
        if any(p.endswith("SSL") for p in self.listener_protocols):
            self.ca_file, server_pem = make_tls_material(run_dir, self.host)
        else:
            server_pem = None

        # Ports: INTERNAL + client listeners on every node, CONTROLLER on controllers.
        names = [INTERNAL, *self.listener_protocols]
        if self.base_port:
            # node i: client listeners from base + 10*(i-1), INTERNAL next, CONTROLLER at +9
            node_ports = {
                n.node_id: {
                    name: self.base_port + 10 * (n.node_id - 1) + j
                    for j, name in enumerate([*self.listener_protocols, INTERNAL, CONTROLLER])
                }
                for n in self.nodes
            }
            for n in self.nodes:
                node_ports[n.node_id][CONTROLLER] = self.base_port + 10 * (n.node_id - 1) + 9
        else:
            count = len(names) * self.node_count + self.controller_count
            ports = iter(free_ports(count, self.host))
            node_ports = {n.node_id: {name: next(ports) for name in names} for n in self.nodes}
            for n in self.nodes:
                if n.is_controller:
                    node_ports[n.node_id][CONTROLLER] = next(ports)
        self.listeners = {
            name: Listener(
                name=name,
                security_protocol="PLAINTEXT" if name == INTERNAL else name,
                addresses=tuple(
                    (n.node_id, self.host, node_ports[n.node_id][name]) for n in self.nodes
                ),
                mechanisms=self.mechanisms if name.startswith("SASL_") else (),
                users=dict(self.users) if name.startswith("SASL_") else {},
                ca_file=self.ca_file if name.endswith("SSL") else None,
            )
            for name in names
        }
        voters = ",".join(
            f"{n.node_id}@{self.host}:{node_ports[n.node_id][CONTROLLER]}"
            for n in self.nodes
            if n.is_controller
        )
        for n in self.nodes:
            props = self._server_properties(n, node_ports[n.node_id], voters, server_pem)
            write_properties(n.config_path, props)
        self._format()
        self._launch()
        self._wait_ready()

    def _server_properties(
        self, node: _Node, ports: Mapping[str, int], voters: str, server_pem: Path | None
    ) -> dict[str, Any]:
        n = self.node_count
        names = [INTERNAL, *self.listener_protocols]
        listeners = [f"{name}://{self.host}:{ports[name]}" for name in names]
        if node.is_controller:
            listeners.append(f"{CONTROLLER}://{self.host}:{ports[CONTROLLER]}")
        proto_map = {INTERNAL: "PLAINTEXT", CONTROLLER: "PLAINTEXT"}
        proto_map.update({p: p for p in self.listener_protocols})
        props: dict[str, Any] = {
            "node.id": node.node_id,
            "process.roles": ",".join(node.roles),
            "controller.quorum.voters": voters,
            "controller.listener.names": CONTROLLER,
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(
                f"{name}://{self.host}:{ports[name]}" for name in names
            ),
            "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in proto_map.items()),
            "inter.broker.listener.name": INTERNAL,
            "log.dirs": str(node.directory / "data"),
            "num.partitions": 1,
            "default.replication.factor": 1,
            "min.insync.replicas": 1,
            "offsets.topic.replication.factor": min(3, n),
            "offsets.topic.num.partitions": 3,
            "transaction.state.log.replication.factor": min(3, n),
            "transaction.state.log.min.isr": min(2, n),
            "transaction.state.log.num.partitions": 3,
            "share.coordinator.state.topic.replication.factor": min(3, n),
            "share.coordinator.state.topic.min.isr": min(2, n),
            "group.initial.rebalance.delay.ms": 0,
            "auto.create.topics.enable": "true",
            "delete.topic.enable": "true",
            # Fewer threads: 2 shared cores.
            "num.network.threads": 2,
            "num.io.threads": 2,
            "background.threads": 2,
            "num.recovery.threads.per.data.dir": 1,
            "num.replica.fetchers": 1,
            "log.cleaner.threads": 1,
            "group.coordinator.threads": 1,
            "share.coordinator.state.topic.num.partitions": 1,
            # Faster unfencing of brokers at start-up.
            "broker.heartbeat.interval.ms": 500,
        }
        sasl_listeners = [p for p in self.listener_protocols if p.startswith("SASL_")]
        if sasl_listeners:
            props["sasl.enabled.mechanisms"] = ",".join(self.mechanisms)
            for name in sasl_listeners:
                lname = name.lower()
                for mech in self.mechanisms:
                    if mech == "PLAIN":
                        users = " ".join(f'user_{u}="{p}"' for u, p in self.users.items())
                        jaas = (
                            "org.apache.kafka.common.security.plain.PlainLoginModule required "
                            f"{users};"
                        )
                    else:
                        jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                    props[f"listener.name.{lname}.{mech.lower()}.sasl.jaas.config"] = jaas
        for name in self.listener_protocols:
            if name.endswith("SSL"):
                lname = name.lower()
                props[f"listener.name.{lname}.ssl.keystore.type"] = "PEM"
                props[f"listener.name.{lname}.ssl.keystore.location"] = str(server_pem)
        if self.authorizer:
            props["authorizer.class.name"] = STANDARD_AUTHORIZER
            props["super.users"] = ";".join(self.super_users)
        props.update(VERSION_CONFIG.get(kafka_major(), {}))
        props.update(self.broker_config)
        return props

    def _jvm_env(self) -> dict[str, str]:
        env = dict(os.environ)
        # Kafka's scripts read these; a user's own settings must not leak into test brokers.
        for var in (
            "KAFKA_OPTS",
            "KAFKA_HEAP_OPTS",
            "KAFKA_JVM_PERFORMANCE_OPTS",
            "JAVA_TOOL_OPTIONS",
        ):
            env.pop(var, None)
        return env

    def _format(self) -> None:
        scram = [
            f"--add-scram={mech}=[name={u},password={p}]"
            for mech in self.mechanisms
            if mech.startswith("SCRAM-")
            for u, p in self.users.items()
        ]
        if not any(p.startswith("SASL_") for p in self.listener_protocols):
            scram = []
        procs = []
        for n in self.nodes:
            args = ["format", "-t", str(self.cluster_id), "-c", str(n.config_path)]
            if n.is_controller:
                args += scram
            log = open(n.directory / "format.log", "wb")  # noqa: SIM115
            procs.append(
                (
                    n,
                    log,
                    subprocess.Popen(
                        java_command(
                            STORAGE_TOOL,
                            *args,
                            jvm_opts=(*TOOL_JVM_OPTS, f"-Dlog4j2.configurationFile={BROKER_LOG4J}"),
                        ),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=self._jvm_env(),
                    ),
                )
            )
        failed = []
        for n, log, proc in procs:
            try:
                rc = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            log.close()
            if rc != 0:
                failed.append(f"node {n.node_id}: exit {rc}\n{_tail(n.directory / 'format.log')}")
        if failed:
            raise KafkaStartError("kafka-storage format failed:\n" + "\n".join(failed))

    def _launch(self, nodes: Iterable[_Node] | None = None) -> None:
        for n in self.nodes if nodes is None else nodes:
            opts = (
                *self.jvm_opts,
                f"-Dlog4j2.configurationFile={BROKER_LOG4J}",
                f"-Dkafka.logs.dir={n.directory}",
            )
            log = open(n.log_path, "ab")  # noqa: SIM115
            try:
                n.process = subprocess.Popen(
                    java_command(KAFKA_MAIN, str(n.config_path), jvm_opts=opts),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self._jvm_env(),
                    cwd=n.directory,
                    start_new_session=True,
                    preexec_fn=None if self.detach else _pdeathsig_setter(),
                )
            finally:
                log.close()
            n.pid = n.process.pid

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        want = set(self.node_ids)
        pending = {n.node_id for n in self.nodes}
        while pending:
            for n in self.nodes:
                if not n.alive():
                    raise KafkaStartError(
                        f"Kafka node {n.node_id} exited during start-up\n{self.tail_logs()}"
                    )
            for node_id in sorted(pending):
                port = self.probe_listener.port(node_id)
                if not api_versions_ok(self.host, port):
                    continue
                with contextlib.suppress(OSError, struct.error, UnicodeDecodeError):
                    if metadata_cluster_id(self.host, port) != self.cluster_id:
                        continue  # not our node (yet): something else holds the port
                    if set(metadata_brokers(self.host, port)) == want:
                        pending.discard(node_id)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise KafkaStartError(
                    f"Kafka nodes {sorted(pending)} not ready after {self.start_timeout:.0f}s "
                    f"(want brokers {sorted(want)} in Metadata)\n{self.tail_logs()}"
                )
            time.sleep(0.1)

    def is_ready(self) -> bool:
        """Every node answers ApiVersions and Metadata lists all brokers."""
        want = set(self.node_ids)
        try:
            return all(
                set(metadata_brokers(self.host, self.probe_listener.port(i))) == want for i in want
            )
        except (OSError, struct.error, KeyError):
            return False

    # ------------------------------------------------------------------ faults (tests/faults)

    def kill_node(self, node_id: int, sig: int = signal.SIGKILL, timeout: float = 30.0) -> None:
        """Send `sig` to one node's JVM and wait until it has exited (SIGKILL after `timeout`).

        Its data and ports stay: `start_nodes([node_id])` brings the same node back.
        """
        n = next(n for n in self.nodes if n.node_id == node_id)
        with contextlib.suppress(ProcessLookupError):
            os.kill(n.pid, sig)  # type: ignore[arg-type]
        deadline = time.monotonic() + timeout
        while n.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if n.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(n.pid, signal.SIGKILL)  # type: ignore[arg-type]
        if n.process is not None:
            n.process.wait(timeout=10)

    def stop_nodes(self, timeout: float = 30.0) -> None:
        """SIGTERM every node (brokers first, as `stop()`), keeping data and work directory."""
        self._stop_processes(timeout)

    def start_nodes(self, node_ids: Iterable[int] | None = None) -> None:
        """Start stopped nodes again (same config, data and ports); wait until all are ready.

        Raises KafkaStartError after `start_timeout` seconds, like `start()`.
        """
        wanted = set(self.node_ids if node_ids is None else node_ids)
        self._launch([n for n in self.nodes if n.node_id in wanted and not n.alive()])
        self._wait_ready()

    def _stop_processes(self, timeout: float = 30.0) -> None:
        # Brokers first: their controlled shutdown needs a live controller.
        brokers = [n for n in self.nodes if not n.is_controller]
        controllers = [n for n in self.nodes if n.is_controller]
        for group in (brokers, controllers):
            live = [n for n in group if n.alive()]
            for n in live:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(n.pid, signal.SIGTERM)  # type: ignore[arg-type]
            deadline = time.monotonic() + timeout
            for n in live:
                while n.alive() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if n.alive():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(n.pid, signal.SIGKILL)  # type: ignore[arg-type]
                if n.process is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        n.process.wait(timeout=10)

    def _cleanup_workdir(self) -> None:
        if self.workdir is not None and not self._keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ diagnostics

    def tail_logs(self, lines: int = 40) -> str:
        """Each node's ERROR/FATAL lines and exception causes, then its last `lines` lines."""
        out = []
        for n in self.nodes:
            errors = _error_lines(n.log_path)
            if errors:
                out.append(f"----- node {n.node_id}: errors in {n.log_path}")
                out.append(errors)
            out.append(f"----- node {n.node_id}: {n.log_path} (last {lines} lines)")
            out.append(_tail(n.log_path, lines))
        return "\n".join(out)

    # ------------------------------------------------------------------ admin helpers

    def admin(self, **extra: Any):
        """A confluent-kafka AdminClient on the INTERNAL listener (super user with authz)."""
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.internal.confluent_config(**extra))

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Create a topic through the Admin API and wait until every broker knows it."""
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        fut = admin.create_topics(
            [NewTopic(name, partitions, replication_factor, config=dict(config or {}))],
            operation_timeout=timeout,
        )[name]
        fut.result(timeout=timeout)
        deadline = time.monotonic() + timeout
        while True:
            md = admin.list_topics(topic=name, timeout=timeout)
            t = md.topics.get(name)
            if (
                t is not None
                and t.error is None
                and len(t.partitions) == partitions
                and all(p.leader >= 0 for p in t.partitions.values())
            ):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name} not ready: {t}")
            time.sleep(0.05)

    @property
    def acls(self):
        """`tests.kafka.acls.KafkaAcls` for this cluster (authorizing clusters only)."""
        if not self.authorizer:
            raise RuntimeError("this cluster has no authorizer (KafkaCluster(authorizer=True))")
        if self._acls is None:
            from tests.kafka.acls import KafkaAcls

            self._acls = KafkaAcls(self)
        return self._acls

    # ------------------------------------------------------------------ state (local CLI)

    def to_state(self) -> dict[str, Any]:
        return {
            "kafka_version": kafka_version(),
            "cluster_id": self.cluster_id,
            "workdir": str(self.workdir),
            "host": self.host,
            "authorizer": self.authorizer,
            "listener_protocols": list(self.listener_protocols),
            "nodes": [
                {
                    "node_id": n.node_id,
                    "roles": list(n.roles),
                    "directory": str(n.directory),
                    "pid": n.pid,
                }
                for n in self.nodes
            ],
            "listeners": {k: v.to_json() for k, v in self.listeners.items()},
            "start_seconds": self.start_seconds,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> KafkaCluster:
        """Re-attach to a cluster started elsewhere (by pid), e.g. to stop it."""
        c = cls(
            nodes=len(state["nodes"]),
            listeners=state["listener_protocols"],
            authorizer=state["authorizer"],
            workdir=state["workdir"],
            host=state["host"],
            detach=True,
        )
        c.workdir = Path(state["workdir"])
        c.cluster_id = state["cluster_id"]
        c.nodes = [
            _Node(
                node_id=d["node_id"],
                roles=tuple(d["roles"]),
                directory=Path(d["directory"]),
                pid=d["pid"],
            )
            for d in state["nodes"]
        ]
        c.listeners = {k: Listener.from_json(v) for k, v in state["listeners"].items()}
        ca = next((li.ca_file for li in c.listeners.values() if li.ca_file), None)
        c.ca_file = ca
        return c

    def __repr__(self) -> str:
        lst = ", ".join(f"{k}={v.bootstrap}" for k, v in self.listeners.items())
        return f"KafkaCluster(nodes={self.node_count}, {lst or 'not started'})"


_ERROR_LINE = re.compile(r"\] (ERROR|FATAL) |^Caused by: |^[\w.$]+(Exception|Error)\b")


def _error_lines(path: Path, limit: int = 12) -> str:
    try:
        with open(path, "rb") as f:
            text = f.read(4 * 1024 * 1024).decode(errors="replace")
    except OSError:
        return ""
    hits: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        if _ERROR_LINE.search(line):
            key = line.split("] ", 1)[-1]  # the same error again, at another time
            if key not in seen:
                seen.add(key)
                hits.append(line)
    if len(hits) > limit:  # the first errors and the fatal ones at exit matter most
        half = limit // 2
        hits = [*hits[:half], f"... {len(hits) - limit} more ...", *hits[-(limit - half) :]]
    return "\n".join(hits)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 256 * 1024))
            text = f.read().decode(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:])


if __name__ == "__main__":  # pragma: no cover - quick manual check
    with KafkaCluster(nodes=int(sys.argv[1]) if len(sys.argv) > 1 else 1) as k:
        print(k, f"started in {k.start_seconds:.1f}s", k.rss())
