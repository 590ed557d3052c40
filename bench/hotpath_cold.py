"""aclgate's sans-IO work per request with cold CPU caches, pure Python against the hot path
compiled by mypyc (docs/bench.md, "The compiled hot path").

    python -m bench.hotpath_cold [--rounds 6] [--out bench/results]

bench/hotpath_cost.py times a round trip with warm caches (3.5-9 µs): a lower bound. In a
live proxy the client and the broker run between two requests of a connection and evict the
caches, and the same Python costs several times that. Here, before each timed round trip the
process copies 16 MiB (evicting L1, L2 and most of the shared cache), then times one round
trip of hotpath_cost's session; the median of 400 per case. Rounds alternate the pure-Python
checkout and a compiled copy of it (bench/compiled.py), each in its own process, and the
report pairs them round by round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.compiled import compiled_tree, tree_env
from bench.latency import environment
from bench.recording import measured_code, write_results

ROOT = Path(__file__).resolve().parents[1]
CASES = ("metadata", "produce", "produce_v13", "fetch_v17")
EVICT_BYTES = 16 << 20
TIMED = 400
WARMUP = 200


def _inner(timed: int) -> None:
    """One process's measurement: {"describe": ..., case: median µs}, as JSON on stdout."""
    from aclgate.native import describe
    from bench import hotpath_cost

    fns = hotpath_cost.cases()
    big = bytearray(EVICT_BYTES)
    out: dict[str, Any] = {"describe": describe()}
    for name in CASES:
        fn = fns[name]
        for _ in range(WARMUP):
            fn()
        times = []
        for _ in range(timed):
            bytes(big)  # what the client and the broker do to the caches between requests
            started = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - started)
        out[name] = statistics.median(times) / 1000
    print(json.dumps(out))


def _run(tree: Path, timed: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.hotpath_cold", "--inner", "--timed", str(timed)],
        cwd=tree, env=tree_env(PYTHONHASHSEED="0"), capture_output=True, text=True, check=True,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=6, help="rounds of each build (6)")
    parser.add_argument(
        "--timed", type=int, default=TIMED, help=f"timed round trips per case ({TIMED})"
    )
    parser.add_argument("--out", type=Path, default=None, help="write hotpath_cold.json/.md")
    args = parser.parse_args()
    if args.inner:
        _inner(args.timed)
        return
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="aclgate-cold-") as tmp:
        trees = {"pure": ROOT, "compiled": compiled_tree(Path(tmp) / "tree")}
        rounds: list[dict[str, dict[str, Any]]] = []
        for i in range(args.rounds):
            order = list(trees) if i % 2 == 0 else list(reversed(trees))
            rounds.append({build: _run(trees[build], args.timed) for build in order})
            print(f"round {i + 1}: " + "; ".join(
                f"{b} " + " ".join(f"{c} {rounds[-1][b][c]:.1f}" for c in CASES) for b in trees
            ), flush=True)  # fmt: skip
    assert all(r["compiled"]["describe"].startswith("compiled") for r in rounds)
    summary = {
        build: {c: statistics.median(r[build][c] for r in rounds) for c in CASES} for build in trees
    }
    paired = {c: sorted(r["compiled"][c] - r["pure"][c] for r in rounds) for c in CASES}
    env = {**environment(), "load_before": load, "load_after": os.getloadavg()[0]}
    lines = [
        "# aclgate's sans-IO work per round trip, cold caches (bench/hotpath_cold.py)",
        "",
        f"`python -m bench.hotpath_cold --rounds {args.rounds}`, "
        f"{measured_code(env)}, load "
        f"{env['load_before']:.1f} before and {env['load_after']:.1f} after on {env['cores']} "
        f"cores. Median µs of {args.timed} round trips (request in, answer out), each after a "
        f"{EVICT_BYTES >> 20} MiB copy; median of {args.rounds} rounds per build, alternating:",
        "",
        "| µs per round trip | " + " | ".join(CASES) + " |",
        "|---|" + "---:|" * len(CASES),
        *(
            f"| {build} | " + " | ".join(f"{summary[build][c]:.1f}" for c in CASES) + " |"
            for build in trees
        ),
        "| compiled minus pure, paired: median (range) | "
        + " | ".join(
            f"{statistics.median(paired[c]):+.1f} ({paired[c][0]:+.1f} to {paired[c][-1]:+.1f})"
            for c in CASES
        )
        + " |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        data = {"rounds": rounds, "median": summary, "paired": paired, "environment": env}
        write_results(args.out, "hotpath_cold", data, text)


if __name__ == "__main__":
    main()
