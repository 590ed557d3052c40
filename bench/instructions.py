"""Instructions per request, counted by valgrind's callgrind: a regression guard noise cannot fool.

    python -m bench.instructions                   # sans-IO session, twice; prints the table
    python -m bench.instructions --serve           # also through a running `aclgate serve`
    python -m bench.instructions --out bench/results   # rewrite the baseline (make target)

Timings on the shared 2-core machines move by ±20-30% between rounds; the number of machine
instructions a fixed sequence of requests executes does not (the same binary, inputs and hash
seed give the same count to the instruction, whatever else runs). So the guard
(tests/bench/test_instruction_guard.py) counts instructions against the recorded baseline
bench/results/instructions.json.

Cases: the hot-path requests of bench/hotpath_cost.py, with its builders and its session:
Produce v9 (acks=1, one 100-byte record), Produce v13 (one 15 KiB batch, by topic id), Fetch v17
(sessionless, by topic id, 1 KiB of records in the answer) and Metadata v12 (one topic).

**sans-IO** (`sansio`): hotpath_cost's ProxySession (the real API table, decision recorder and
metrics observer) is fed one request and the broker's answer per round trip, in memory, in one
Python process under callgrind. Each case is warmed up, then run N times and 2N times; the
process calls `os.getppid()` before and `os.getpgrp()` after each run, and callgrind is told to
zero its counters on entering the C function `os_getppid` and to dump them on entering
`os_getpgrp` (`--zero-before`, `--dump-before`). The count per request is
(count of 2N - count of N) / N: start-up, warm-up and the fixed cost of a run cancel out, and
what is left is the round trip plus the loop's own few instructions.

**through `aclgate serve`** (`serve`): `aclgate serve --allow-everyone-if-no-acl-found` runs
under callgrind in front of a scripted broker (tests/fixtures/scripted_broker.py) that answers
with the same fixed encoded answers; a client outside valgrind sends the requests one at a time
on one connection, zeroing the proxy's counters (`callgrind_control --zero`) before N and 2N
requests and dumping them after (`callgrind_control --dump`), twice, and takes
(least count of 2N - least count of N) / N: the proxy's periodic tasks wake now and then (one
such wake-up is ~0.75M instructions) and the least count of each size leaves them out. The count
includes everything the proxy process does per request in user space: uvloop, the syscall
wrappers, the session; not the kernel.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from bench import hotpath_cost
from bench.compiled import compiled_tree, tree_env
from bench.recording import write_results

#: The guarded requests: hotpath_cost's case name -> what it is.
CASES: dict[str, str] = {
    "metadata": "Metadata v12 (one topic)",
    "produce": "Produce v9 (acks=1, one 100 B record)",
    "produce_v13": "Produce v13 (acks=1, one 15 KiB batch)",
    "fetch_v17": "Fetch v17 (sessionless, 1 KiB answer)",
}
#: Round trips per measured run (N, then 2N) and before them; chosen so one sans-IO run of all
#: four cases takes ~10 s under callgrind on these machines.
SANSIO_N = 200
SANSIO_WARMUP = 50
SERVE_N = 100
SERVE_WARMUP = 100
#: Pairs of runs (N, 2N) per case through `aclgate serve`: its periodic tasks wake now and
#: then, and the least count of each size leaves such a wake-up out.
SERVE_REPEATS = 2
#: Fixed inputs: the hash seed (set sizes, dict orders) and no bytecode writes.
ENV = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "bench" / "results" / "instructions.json"
_SUMMARY = re.compile(rb"^summary: (\d+)$", re.M)


def valgrind() -> str | None:
    """The valgrind executable, or None when it is not installed."""
    return shutil.which("valgrind")


def valgrind_version() -> str:
    return subprocess.run(
        ["valgrind", "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _callgrind(out_file: Path, *extra: str) -> list[str]:
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", *extra]


def _dumps(out_file: Path) -> list[int]:
    """The instruction counts of callgrind's numbered dumps out_file.1, .2, ... in order."""
    counts = []
    for n in range(1, 10_000):
        part = out_file.with_name(f"{out_file.name}.{n}")
        if not part.exists():
            break
        m = _SUMMARY.search(part.read_bytes())
        assert m, f"no summary line in {part}"
        counts.append(int(m.group(1)))
    return counts


def _per_request(counts: Sequence[int], n: int, repeats: int) -> dict[str, float]:
    """Dumps per case, in CASES order, of runs of N, 2N, N, 2N, ... (`repeats` pairs) ->
    instructions per request: (least count of 2N - least count of N) / N. The least count
    leaves out a one-off wake-up (a periodic task of the proxy, ~0.75M instructions) that
    fell into a run; the difference cancels the fixed cost of a run."""
    per_case = 2 * repeats
    assert len(counts) == per_case * len(CASES), counts
    out = {}
    for i, name in enumerate(CASES):
        runs = counts[per_case * i : per_case * (i + 1)]
        out[name] = round((min(runs[1::2]) - min(runs[0::2])) / n, 1)
    return out


# --- sans-IO -------------------------------------------------------------------------------


def _inner_sansio(n: int, warmup: int) -> None:
    """Runs inside callgrind: each case warmed up, then N and 2N round trips between markers."""
    fns = hotpath_cost.cases()
    for name in CASES:
        fn = fns[name]
        for _ in range(warmup):
            fn()
    instrument_self()
    for name in CASES:
        fn = fns[name]
        for runs in (n, 2 * n):
            os.getppid()  # callgrind: --zero-before=os_getppid
            for _ in range(runs):
                fn()
            os.getpgrp()  # callgrind: --dump-before=os_getpgrp


def instrument_self() -> None:
    """Switch callgrind's instrumentation on in this process (started with
    --instr-atstart=no): the imports and set-up run ~8x faster uninstrumented."""
    subprocess.run(
        ["callgrind_control", "--instr=on", str(os.getpid())], check=True, capture_output=True
    )


def count_sansio(
    n: int = SANSIO_N, warmup: int = SANSIO_WARMUP, tree: Path = ROOT
) -> dict[str, float]:
    """Instructions per sans-IO round trip, per case (one callgrind run), of the code in
    `tree` (this checkout, or a compiled copy of it: bench/compiled.py)."""
    with tempfile.TemporaryDirectory(prefix="aclgate-cg-") as tmp:
        out_file = Path(tmp) / "cg.out"
        cmd = [
            *_callgrind(
                out_file,
                "--instr-atstart=no",
                "--zero-before=os_getppid",
                "--dump-before=os_getpgrp",
            ),
            sys.executable,
            "-m",
            "bench.instructions",
            "--inner-sansio",
            str(n),
            "--warmup",
            str(warmup),
        ]
        done = subprocess.run(cmd, cwd=tree, env=_env(), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
        return _per_request(_dumps(out_file), n, 1)


# --- through `aclgate serve` ---------------------------------------------------------------

_SIZE = struct.Struct(">i")
#: (API key, version) of each case's request -> its case name, for the scripted broker.
_REQUESTS = {(0, 9): "produce", (0, 13): "produce_v13", (1, 17): "fetch_v17", (3, 12): "metadata"}


def _control(pid: int, *args: str) -> None:
    """callgrind_control on the proxy process (through vgdb)."""
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def _scripted_answers(node: Any) -> None:
    """The scripted node answers the measured requests with hotpath_cost's fixed answers,
    the correlation id patched in; other requests (the proxy's own) get its defaults."""
    from tests.fixtures.scripted_broker import DEFAULT_SCRIPT

    answers = hotpath_cost._answers(0)

    def answer(fallback: Any) -> Callable[[Any, Any, Any], Any]:
        def script(node: Any, header: Any, request: Any) -> Any:
            name = _REQUESTS.get((header.api_key, header.api_version))
            if name is None or (name == "metadata" and not request.topics):
                return fallback(node, header, request)
            out = bytearray(answers[name])
            out[4:8] = header.correlation_id.to_bytes(4, "big", signed=True)
            return bytes(out)

        return script

    for key in (0, 1, 3):
        node.script[key] = answer(DEFAULT_SCRIPT.get(key))


class _Client:
    """One blocking connection sending requests one at a time (outside valgrind)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0

    def round_trip(self, request: bytes) -> None:
        self.corr += 1
        frame = bytearray(request)
        frame[8:12] = self.corr.to_bytes(4, "big")
        self.sock.sendall(frame)
        size = _SIZE.unpack(self._exactly(4))[0]
        answer = self._exactly(size)
        assert int.from_bytes(answer[:4], "big") == self.corr, "answer out of order"

    def _exactly(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = self.sock.recv(left)
            assert chunk, "the proxy closed the connection"
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


#: The proxies measured in their own process, as `python ARGS --upstream U --listen L`.
PROXIES = {
    "serve": ["-m", "aclgate", "serve", "--allow-everyone-if-no-acl-found"],
    "relay": ["-m", "bench.relay"],  # the floor: bytes copied both ways, nothing parsed
}


@contextmanager
def _proxy(
    proxy: str, upstream: str, prefix: Sequence[str], log: Path, tree: Path = ROOT
) -> Iterator[tuple[int, int]]:
    """The proxy in its own process (under `prefix`, e.g. valgrind): yields its client port
    and its pid once it accepts connections."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cmd = [*prefix, sys.executable, *PROXIES[proxy], "--upstream", upstream]
    cmd += ["--listen", f"127.0.0.1:{port}"]
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, cwd=tree, env=_env(), stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{cmd} did not start:\n{log.read_text()}") from None
                time.sleep(0.2)
        yield port, proc.pid  # valgrind runs the program in its own process
    finally:
        proc.terminate()
        proc.wait(60)


@contextmanager
def _upstream_and_requests() -> Iterator[tuple[str, dict[str, bytes]]]:
    """The scripted broker's address and each case's request (correlation id 0)."""
    from tests.fixtures.scripted_broker import ScriptedCluster

    requests = hotpath_cost.build_requests(hotpath_cost.TOPIC, hotpath_cost.TOPIC_ID)
    requests["produce_v13"] = hotpath_cost._produce_v13()
    with ScriptedCluster([1]) as cluster:
        _scripted_answers(cluster.nodes[0])
        yield cluster.bootstrap, requests


def count_process(
    n: int = SERVE_N, warmup: int = SERVE_WARMUP, proxy: str = "serve", tree: Path = ROOT
) -> dict[str, float]:
    """Instructions per request of the proxy's process, per case (one callgrind run)."""
    with (
        tempfile.TemporaryDirectory(prefix="aclgate-cg-") as tmp,
        _upstream_and_requests() as (upstream, requests),
    ):
        out_file = Path(tmp) / "cg.out"
        prefix = _callgrind(out_file, "--instr-atstart=no")
        log = out_file.with_name("proxy.log")
        with _proxy(proxy, upstream, prefix, log, tree) as (port, pid):
            client = _Client(port)
            for name in CASES:  # Metadata first teaches the proxy the topic id
                for _ in range(warmup):
                    client.round_trip(requests[name])
            _control(pid, "--instr=on")
            for name in CASES:
                for runs in (n, 2 * n) * SERVE_REPEATS:
                    _control(pid, "--zero")
                    for _ in range(runs):
                        client.round_trip(requests[name])
                    _control(pid, f"--dump={name}-{runs}")
            client.sock.close()
            counts = _dumps(out_file)
        return _per_request(counts, n, SERVE_REPEATS)


def count_serve(n: int = SERVE_N) -> dict[str, float]:
    """Instructions per request of the `aclgate serve` process, per case."""
    return count_process(n, proxy="serve")


def count_sansio_compiled(n: int = SANSIO_N) -> dict[str, float]:
    """count_sansio of a copy of this checkout with the hot path compiled by mypyc."""
    return count_sansio(n, tree=compiled_copy())


def count_serve_compiled(n: int = SERVE_N) -> dict[str, float]:
    """count_serve of a copy of this checkout with the hot path compiled by mypyc."""
    return count_process(n, proxy="serve", tree=compiled_copy())


@functools.cache
def compiled_copy() -> Path:
    """This checkout with its hot path compiled (bench/compiled.py), once per process."""
    tmp = Path(tempfile.mkdtemp(prefix="aclgate-compiled-"))
    atexit.register(shutil.rmtree, tmp, True)
    return compiled_tree(tmp / "tree")


def _env() -> dict[str, str]:
    """The measured processes' environment: fixed inputs, and the code of the tree they run
    in (bench.compiled.tree_env)."""
    return tree_env(**ENV)


def count_relay(n: int = SERVE_N) -> dict[str, float]:
    """Instructions per request of the bare relay's process (bench/relay.py), per case."""
    return count_process(n, proxy="relay")


def count_syscalls(requests_per_case: int = 1000, warmup: int = 200) -> dict[str, Any]:
    """System calls per request of the relay and of `aclgate serve` (not under valgrind),
    per case: `strace -c -f` attached to the proxy around the measured requests."""
    out: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="aclgate-strace-") as tmp,
        _upstream_and_requests() as (upstream, requests),
    ):
        for proxy in ("relay", "serve"):
            with _proxy(proxy, upstream, (), Path(tmp) / f"{proxy}.log") as (port, pid):
                client = _Client(port)
                for name in CASES:
                    for _ in range(warmup):
                        client.round_trip(requests[name])
                for name in CASES:
                    summary = Path(tmp) / f"{proxy}-{name}.txt"
                    tracer = subprocess.Popen(
                        ["strace", "-c", "-f", "-p", str(pid), "-o", str(summary)],
                        stderr=subprocess.PIPE,
                    )
                    time.sleep(1.0)  # strace attached (it prints nothing until it detaches)
                    for _ in range(requests_per_case):
                        client.round_trip(requests[name])
                    tracer.send_signal(2)
                    tracer.wait(30)
                    out.setdefault(proxy, {})[name] = _per_call(
                        summary.read_text(), requests_per_case
                    )
                client.sock.close()
    return out


def _per_call(strace_summary: str, requests: int) -> dict[str, float]:
    """strace -c's table -> calls per request of each system call (and 'total')."""
    calls: dict[str, float] = {}
    for line in strace_summary.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0].replace(".", "").isdigit() and parts[-1] != "total":
            calls[parts[-1]] = round(int(parts[3]) / requests, 2)
    calls["total"] = round(sum(calls.values()), 2)
    return calls


def environment() -> dict[str, Any]:
    """What the counts depend on: the interpreter build, valgrind, the code and the CPU (glibc
    picks its memcpy variant by CPU features)."""
    env = hotpath_cost.environment()
    exported = os.environ.get("BENCH_COMMIT")  # a `git archive` export has no .git
    return {
        "python": sys.version.split()[0],
        "valgrind": valgrind_version(),
        "commit": exported or env["git_commit"],
        "uncommitted_proxy_or_protocol": False if exported else env["git_dirty_measured_code"],
        "kio": env["kio"],
        "uvloop": env["uvloop"],
        "cpu": env["cpu_model"],
    }


class Mode(NamedTuple):
    title: str
    counter: Callable[[int], dict[str, float]]
    n: int
    method: str
    #: How far above the baseline a count may go before the guard fails: about twenty times
    #: the spread between runs of the sans-IO session (~0.1%), five times that of `aclgate
    #: serve` (up to 1%: the wake-ups of its periodic tasks; docs/bench.md).
    margin: float | None  # None: recorded for comparison, not guarded


#: What is counted, and how.
MODES = {
    "sansio": Mode(
        "sans-IO session",
        count_sansio,
        SANSIO_N,
        f"(count of {2 * SANSIO_N} - count of {SANSIO_N} round trips) / {SANSIO_N}",
        0.02,
    ),
    "serve": Mode(
        "aclgate serve process",
        count_serve,
        SERVE_N,
        f"(least count of {SERVE_REPEATS} runs of {2 * SERVE_N} requests - least of "
        f"{SERVE_REPEATS} runs of {SERVE_N}) / {SERVE_N}",
        0.05,
    ),
    "sansio_compiled": Mode(
        "sans-IO session, compiled",
        count_sansio_compiled,
        SANSIO_N,
        "as the sans-IO session, in a copy of the checkout with aclgate/native.py's hot "
        "modules compiled by mypyc",
        0.02,
    ),
    "serve_compiled": Mode(
        "aclgate serve process, compiled",
        count_serve_compiled,
        SERVE_N,
        "as the aclgate serve process, compiled as the sans-IO session",
        0.05,
    ),
    "relay": Mode(
        "bare relay process (the floor)",
        count_relay,
        SERVE_N,
        "as the aclgate serve process",
        None,
    ),
}


def record(runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """The baseline: per mode and case, the mean of the runs, and every run."""
    return {
        "margin": {mode: MODES[mode].margin for mode in runs if MODES[mode].margin},
        "n": {mode: MODES[mode].n for mode in runs},
        "instructions_per_request": {
            mode: {case: round(sum(r[case] for r in counted) / len(counted)) for case in CASES}
            for mode, counted in runs.items()
        },
        "runs": runs,
        "environment": environment(),
    }


def table(data: dict[str, Any]) -> str:
    per = data["instructions_per_request"]
    lines = [
        "| Request | " + " | ".join(MODES[m].title for m in per) + " |",
        "|---|" + "---:|" * len(per),
    ]
    for case, label in CASES.items():
        cells = [
            f"{per[mode][case]:,} ({', '.join(f'{r[case]:,.0f}' for r in data['runs'][mode])})"
            for mode in per
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(data: dict[str, Any]) -> str:
    env = data["environment"]
    dirty = (
        " (uncommitted proxy/ or protocol/ changes)" if env["uncommitted_proxy_or_protocol"] else ""
    )
    return "\n".join(
        [
            "# Instructions per request (callgrind)",
            "",
            f"`python -m bench.instructions --serve` at commit {(env['commit'] or '?')[:7]}{dirty}, "
            f"Python {env['python']}, {env['valgrind']}, kio {env['kio']}, uvloop {env['uvloop']}, "
            f"{env['cpu']}. Machine instructions (valgrind's Ir) executed per request and its "
            "answer; each cell is the mean of the callgrind runs, the runs in parentheses. "
            "Per mode: "
            + "; ".join(f"{MODES[m].title}: {MODES[m].method}" for m in data["n"])
            + ".",
            "",
            table(data),
            "",
            "tests/bench/test_instruction_guard.py (in `make test`) fails when a count exceeds "
            "this baseline by more than "
            + " or ".join(f"{v:.0%} ({MODES[m].title})" for m, v in data["margin"].items())
            + "; `make bench-instructions-baseline` "
            "re-records it (say why in the commit). docs/bench.md, 'Instruction counts'.",
            "",
            *syscall_table(data.get("syscalls_per_request")),
        ]
    )


def syscall_table(syscalls: dict[str, dict[str, dict[str, float]]] | None) -> list[str]:
    """Markdown lines: system calls per request, the relay and aclgate side by side."""
    if not syscalls:
        return []
    lines = [
        "System calls per request of the proxy process (`--syscalls`: `strace -c -f` attached "
        "around 1,000 requests of each kind, not under valgrind), relay / aclgate serve:",
        "",
        "| Request | total | " + " | ".join(_SYSCALLS) + " |",
        "|---|" + "---:|" * (len(_SYSCALLS) + 1),
    ]
    for case, label in CASES.items():
        cells = [
            " / ".join(f"{syscalls[p][case].get(call, 0):g}" for p in ("relay", "serve"))
            for call in ("total", *_SYSCALLS)
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, ""]


#: The system calls the syscall table shows (the rest are in the JSON).
_SYSCALLS = ("epoll_pwait", "read", "write")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inner-sansio", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=int, default=SANSIO_WARMUP, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=2, help="callgrind runs per mode (2)")
    parser.add_argument(
        "--serve", action="store_true", help="also through `aclgate serve` and the bare relay"
    )
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="also with the hot path compiled by mypyc (a copy of the checkout, built once)",
    )
    parser.add_argument(
        "--syscalls", action="store_true", help="also system calls per request (strace -c)"
    )
    parser.add_argument("--out", type=Path, default=None, help="write instructions.json/.md")
    args = parser.parse_args()
    if args.inner_sansio:
        _inner_sansio(args.inner_sansio, args.warmup)
        return
    if valgrind() is None:
        sys.exit("valgrind is not installed (apt-get install -y valgrind)")
    modes = ["sansio", "serve", "relay"] if args.serve else ["sansio"]
    if args.compiled:
        modes[1:1] = ["sansio_compiled"] + (["serve_compiled"] if args.serve else [])
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for i in range(args.runs):
        for mode in modes:
            started = time.monotonic()
            runs[mode].append(MODES[mode].counter(MODES[mode].n))
            print(f"{mode} run {i + 1}: {runs[mode][-1]} ({time.monotonic() - started:.0f} s)")
    data = record(runs)
    if args.syscalls:
        data["syscalls_per_request"] = count_syscalls()
    text = markdown(data)
    print(text)
    if args.out is not None:
        write_results(args.out, "instructions", data, text)


if __name__ == "__main__":
    main()
