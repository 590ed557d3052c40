"""`aclgate serve --workers N`: a supervisor process keeping N proxy worker processes.

Every worker is a full proxy (proxy/process/worker.py) with its own upstream connections, binding the
same ports with SO_REUSEPORT; the kernel spreads new connections over the workers. The
supervisor holds no client socket: it starts the workers, restarts one that dies (with a
backoff, logged), forwards SIGTERM/SIGINT so that every worker drains, and serves the one
/metrics (the workers' expositions merged, proxy/ops/metricsmerge.py), /healthz and /readyz,
asking every worker on its loopback health port. ACL and TLS file changes need nothing from
it: every worker follows those files itself. docs/design.md says why SO_REUSEPORT.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from aclgate.protocol.enforce.cursor import KEY_SIZE
from aclgate.proxy.aclstore.kafka.client import transactional_id
from aclgate.proxy.config import ProxyConfig, bind_error
from aclgate.proxy.ops.http import HealthServer
from aclgate.proxy.ops.metricsmerge import MetricsMerger, parse
from aclgate.proxy.process.worker import Assignment, encode_assignment

log = logging.getLogger("aclgate.workers")

#: restart delays: the first after FIRST_BACKOFF, doubling for each worker that dies again
#: within STABLE_SECONDS of starting, up to MAX_BACKOFF
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
STABLE_SECONDS = 30.0
#: how long the supervisor waits for a worker's health endpoint
ASK_TIMEOUT = 5.0
#: beyond --shutdown-grace, how long a stopping worker may take before it is killed
STOP_MARGIN = 10.0

#: /readyz: how the workers' details of one key become the supervisor's (others: per worker)
READY_MERGE: dict[str, Callable[[list[Any]], Any]] = {
    "upstream_reachable": all,
    "acls_loaded": all,
    "policy_version": min,
    "acl_count": min,
    "connections": sum,
}


def worker_config(config: ProxyConfig, index: int) -> ProxyConfig:
    """Worker `index`'s configuration: no public health port (the supervisor has it), an
    audit file and audit spool of its own (two processes cannot rotate one file or share one
    spool), and an ACL writer transactional id of its own (two live producers with one id
    fence each other)."""
    tid = transactional_id(config)
    if tid is not None:
        config = dataclasses.replace(config, acl_transactional_id=f"{tid}-worker-{index}")
    audit = config.audit_file
    if audit is not None:
        audit = audit.with_name(f"{audit.stem}.worker-{index}{audit.suffix}")
    spool = config.audit_spool
    if spool is not None:
        spool = spool.with_name(f"{spool.name}.worker-{index}")
    return dataclasses.replace(config, metrics_listen=None, audit_file=audit, audit_spool=spool)


@dataclass
class WorkerSlot:
    """One worker position: the process in it now, and its history."""

    index: int
    process: asyncio.subprocess.Process | None = None
    pid: int = 0
    #: where the worker's own /metrics, /healthz and /readyz answer (loopback)
    health: tuple[str, int] | None = None
    started_at: float = 0.0
    restarts: int = 0
    quick_failures: int = 0
    #: the worker's last exposition, kept to retire its counters when it exits
    last_metrics: str = ""

    @property
    def up(self) -> bool:
        return self.health is not None


class WorkerStartFailed(Exception):
    """A worker exited before it listened (a taken port, a bad ACL file...)."""


async def http_get(address: tuple[str, int], path: str) -> tuple[int, bytes]:
    """GET `path` from a worker's health server (HTTP/1.1, one request, Connection: close)."""
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: worker\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)
    if len(status) < 2 or not status[1].isdigit():
        raise ConnectionError(f"not an HTTP answer from {address[0]}:{address[1]}")
    return int(status[1]), body


class Supervisor:
    def __init__(self, config: ProxyConfig):
        self.config = config
        self.slots = [WorkerSlot(i) for i in range(config.workers)]
        #: one cursor key for all workers (protocol/enforce/cursor.py)
        self.cursor_key = os.urandom(KEY_SIZE)
        self.merger = MetricsMerger()
        self.stopping = False
        self._stop = asyncio.Event()
        self._keepers: list[asyncio.Task] = []
        self.http: SupervisorHttp | None = None
        self.metrics_address: tuple[str, int] | None = None

    # lifecycle ---------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        taken = self._taken_port()
        if taken:
            log.error("cannot start: %s", taken)
            return 1
        log.info("starting %d workers", len(self.slots))
        try:
            await asyncio.gather(*(self._spawn(slot) for slot in self.slots))
        except WorkerStartFailed as exc:
            log.error("cannot start: %s; stopping the other workers", exc)
            await self._stop_workers()
            return 1
        self._keepers = [loop.create_task(self._keep(slot)) for slot in self.slots]
        if self.config.metrics_listen:
            self.http = SupervisorHttp(self)
            self.metrics_address = await self.http.start(*self.config.metrics_listen)
            log.info("metrics and health on http://%s:%d/metrics", *self.metrics_address)
        log.info(
            "%d workers serving (pids %s)",
            len(self.slots),
            ", ".join(str(s.pid) for s in self.slots),
        )
        await self._stop.wait()
        log.info("shutting down: stopping %d workers", len(self.slots))
        self.stopping = True
        await self._stop_workers()
        for task in self._keepers:
            task.cancel()
        await asyncio.gather(*self._keepers, return_exceptions=True)
        if self.http is not None:
            await self.http.close()
        return 0

    def _taken_port(self) -> str | None:
        """Why the ports known in advance cannot be ours, or None. The workers' SO_REUSEPORT
        would let them join the sockets of another aclgate started with the same ports (by
        the same user) and silently share its traffic; a plain bind here fails instead."""
        host = self.config.listen[0]
        for port in (self.config.listen[1], *self.config.node_port.values()):
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            try:
                with socket.socket(family, socket.SOCK_STREAM) as probe:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    probe.bind((host, port))
            except OSError as exc:  # named by the setting that asked for it, as serve does
                where = OSError(exc.errno, f"cannot bind on address ('{host}', {port})")
                return bind_error(self.config, where)
        return None

    async def _spawn(self, slot: WorkerSlot) -> None:
        """Start the worker of `slot` and wait until it listens."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "aclgate.proxy.process.worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        slot.process, slot.pid, slot.health = process, process.pid, None
        assert process.stdin is not None and process.stdout is not None  # both piped
        assignment = Assignment(slot.index, worker_config(self.config, slot.index), self.cursor_key)
        process.stdin.write(encode_assignment(assignment))
        # stdin stays open: the worker stops when it reads end of file (supervisor gone)
        line = b""
        while not line.startswith(b'{"health"'):  # skip anything else a library printed
            line = await process.stdout.readline()
            if not line:
                status = await process.wait()
                raise WorkerStartFailed(
                    f"worker {slot.index} (pid {process.pid}) exited {describe_exit(status)} "
                    "before it listened (its log lines say why)"
                )
        host, port = json.loads(line)["health"]
        slot.health = (host, int(port))
        slot.started_at = time.monotonic()

    async def _keep(self, slot: WorkerSlot) -> None:
        """Wait for the worker of `slot` to exit and start another (unless stopping)."""
        while True:
            process = slot.process
            assert process is not None and process.stdout is not None
            while await process.stdout.read(65536):  # nothing is expected; never let it fill
                pass
            status = await process.wait()
            slot.health = None
            if self.stopping:
                return
            self.merger.retire(slot.last_metrics)
            slot.last_metrics = ""
            lived = time.monotonic() - slot.started_at
            slot.quick_failures = slot.quick_failures + 1 if lived < STABLE_SECONDS else 0
            delay = restart_delay(slot.quick_failures)
            log.error(
                "worker %d (pid %d) exited %s after %.1f s; restarting it in %.1f s",
                slot.index,
                process.pid,
                describe_exit(status),
                lived,
                delay,
            )
            await asyncio.sleep(delay)
            if self.stopping:
                return
            try:
                await self._spawn(slot)
            except (WorkerStartFailed, OSError, ValueError, KeyError) as exc:
                # OSError: no process could be made (fork, file descriptors); the others:
                # an unreadable report. The loop waits for that process and tries again.
                log.error("worker %d could not be restarted: %s", slot.index, exc)
                slot.started_at = time.monotonic()
                continue
            slot.restarts += 1
            log.info("worker %d restarted (pid %d)", slot.index, slot.pid)

    async def _stop_workers(self) -> None:
        """SIGTERM every worker (each drains for up to --shutdown-grace), then wait; a worker
        still running STOP_MARGIN seconds after the grace is killed."""
        running = [s.process for s in self.slots if s.process and s.process.returncode is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        if not running:
            return
        waiting = asyncio.gather(*(p.wait() for p in running))
        try:
            async with asyncio.timeout(self.config.shutdown_grace + STOP_MARGIN):
                await waiting
        except TimeoutError:
            for process in running:
                if process.returncode is None:
                    log.warning("worker pid %d did not stop: killing it", process.pid)
                    process.kill()
            await asyncio.gather(*(p.wait() for p in running))

    # asking the workers ---------------------------------------------------------------

    async def ask_all(self, path: str) -> list[tuple[int, bytes] | None]:
        """GET `path` from every worker at once; None for a worker that is down or silent."""

        async def ask(slot: WorkerSlot) -> tuple[int, bytes] | None:
            if slot.health is None:
                return None
            try:
                async with asyncio.timeout(ASK_TIMEOUT):
                    return await http_get(slot.health, path)
            except (OSError, TimeoutError) as exc:
                log.warning("worker %d did not answer %s: %r", slot.index, path, exc)
                return None

        return list(await asyncio.gather(*(ask(s) for s in self.slots)))

    async def metrics(self) -> bytes:
        answers = await self.ask_all("/metrics")
        for slot, answer in zip(self.slots, answers, strict=True):
            if answer is not None and answer[0] == 200:
                slot.last_metrics = answer[1].decode()
        # a silent worker: its last exposition. The merge is pure text processing on these
        # strings, seconds for large expositions: in a thread, the loop (/healthz) goes on.
        texts = [slot.last_metrics for slot in self.slots]
        return await asyncio.to_thread(self._merge, texts, answers)

    def _merge(self, texts: list[str], answers: list[tuple[int, bytes] | None]) -> bytes:
        parsed = [parse(text) for text in texts]
        connections = [
            sum(v for vs in accepted.values.values() for v in vs) if accepted else 0.0
            for accepted in (p.get("aclgate_connections") for p in parsed)
        ]
        return self.merger.exposition(parsed, self._own_metrics(answers, connections))

    def _own_metrics(
        self, answers: list[tuple[int, bytes] | None], connections: list[float]
    ) -> list[Metric]:
        workers = GaugeMetricFamily("aclgate_workers", "Worker processes configured")
        workers.add_metric([], len(self.slots))
        up = GaugeMetricFamily(
            "aclgate_worker_up", "1 while the worker answers the supervisor", labels=["worker"]
        )
        restarts = CounterMetricFamily(
            "aclgate_worker_restarts",
            "Times the worker was restarted after it exited",
            labels=["worker"],
        )
        accepted = CounterMetricFamily(
            "aclgate_worker_connections",
            "Client connections the worker accepted since it (last) started",
            labels=["worker"],
        )
        for slot, answer, count in zip(self.slots, answers, connections, strict=True):
            label = [str(slot.index)]
            up.add_metric(label, answer is not None and answer[0] == 200)
            restarts.add_metric(label, slot.restarts)
            accepted.add_metric(label, count)
        return [workers, up, restarts, accepted]

    async def healthz(self) -> tuple[bool, dict[str, Any]]:
        answers = await self.ask_all("/healthz")
        workers = [
            {"worker": s.index, "pid": s.pid, "healthy": a is not None and a[0] == 200}
            for s, a in zip(self.slots, answers, strict=True)
        ]
        healthy = all(w["healthy"] for w in workers)
        return healthy, {"status": "ok" if healthy else "degraded", "workers": workers}

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready only when every worker is."""
        answers = await self.ask_all("/readyz")
        workers = []
        for slot, answer in zip(self.slots, answers, strict=True):
            entry: dict[str, Any] = {"worker": slot.index, "pid": slot.pid}
            entry["restarts"] = slot.restarts
            entry["health"] = "{}:{}".format(*slot.health) if slot.health else None
            if answer is None:
                entry.update(ready=False, error="not answering")
            else:
                try:
                    entry.update(json.loads(answer[1]))
                except ValueError:
                    entry.update(ready=False, error="unreadable /readyz answer")
                entry["ready"] = answer[0] == 200 and entry.get("ready") is True
            workers.append(entry)
        ready = all(w["ready"] for w in workers)
        details: dict[str, Any] = {"workers": workers}
        for key, merge in READY_MERGE.items():
            values = [w[key] for w in workers if key in w]
            if len(values) == len(workers):
                details[key] = merge(values)
        return ready, details


class SupervisorHttp(HealthServer):
    """The public /metrics, /healthz and /readyz of a supervisor: the workers', merged."""

    def __init__(self, supervisor: Supervisor):
        super().__init__(registry=None, readiness=lambda: (False, {}))  # type: ignore[arg-type]
        self.supervisor = supervisor

    async def build_metrics(self) -> bytes:
        """The workers' expositions merged (concurrent scrapes share one: HealthServer)."""
        return await self.supervisor.metrics()

    async def answer(self, path: str) -> tuple[int, str, bytes]:
        probe = {"/healthz": self.supervisor.healthz, "/readyz": self.supervisor.readiness}.get(
            path
        )
        if probe is None:
            return await super().answer(path)  # /metrics, or the usual 404
        ok, details = await probe()
        key = "ready" if path == "/readyz" else "healthy"
        body = json.dumps({key: ok, **details}, sort_keys=True).encode() + b"\n"
        return (200 if ok else 503), "application/json", body


def restart_delay(quick_failures: int) -> float:
    """Seconds before restarting a worker that died after `quick_failures` consecutive
    short lives (0: it had run for STABLE_SECONDS or more)."""
    return min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** max(0, quick_failures - 1))


def describe_exit(status: int) -> str:
    """`status` of asyncio's Process.wait(): negative for a signal."""
    if status < 0:
        try:
            return f"on signal {signal.Signals(-status).name}"
        except ValueError:
            return f"on signal {-status}"
    return f"with status {status}"


def supervise(config: ProxyConfig) -> int:
    """Run the supervisor until SIGTERM/SIGINT; the exit status of `aclgate serve`."""
    import uvloop

    from aclgate.proxy.process.gctune import tune_gc

    # a merge (in its thread) allocates a parsed object per sample: with the default
    # thresholds, full collections of 150-290 ms held the supervisor's loop during merges of
    # two 825 KB expositions; tuned as the workers are, its worst loop lag is 21-53 ms
    tune_gc()
    return uvloop.run(Supervisor(config).run())
