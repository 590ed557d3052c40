"""The authorizer with group principals (issue 25): does a session's groups cost it speed?

    python -m bench.groups [--before REV] [--rounds N]

On bench/authz.py's AuthorizerBenchmark ACL set (about 510,000 ACLs) plus 1,000 group ACLs
(READ ALLOW on resources 0-999 for Group:team-<i % 20>), one process per measurement, rounds
interleaved, each figure the best of 5 runs in CPU µs per call (bench.authz.per_call_us):

- `authorize`, cached and uncached (cache_size=0), of User:test-user@127.0.0.1 READ on
  Topic:foo-bar35_resource-95 by a session with 0 groups, with 50 groups none of which has an
  ACL, and with 50 groups of which 20 have ACLs (the resource's among them);
- with `--before REV`, the same query without groups at commit REV (a git worktree of it, in
  its own process), the figure before group principals existed.

Writes bench/results/groups.json and bench/results/groups.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.latency import environment
from bench.recording import commit_worktree, measured_code, write_results

RESULTS = Path(__file__).parent / "results"
NAME = "foo-bar35_resource-95"

#: the session kinds measured: (label, groups)
SESSIONS = {
    "no groups": frozenset(),
    "50 groups, none with ACLs": frozenset(f"Group:other-{i}" for i in range(50)),
    "50 groups, 20 with ACLs": frozenset(
        [f"Group:team-{i}" for i in range(20)] + [f"Group:other-{i}" for i in range(30)]
    ),
}


def _measure(with_groups: bool) -> dict[str, float]:
    """In this process: µs per call for each session kind (or, at an old commit without
    group principals, the session without groups alone)."""
    from aclgate.authz.authorizer import Authorizer
    from aclgate.authz.model import AclBinding, AclOperation, AclPermissionType, PatternType
    from aclgate.authz.model import ResourceType as RT
    from bench.authz import PREFIX, PRINCIPAL, kafka_benchmark_acls, per_call_us

    bindings = kafka_benchmark_acls()
    # the same set before and after: an authorizer without groups stores them, never matches
    bindings += [
        AclBinding(
            RT.TOPIC,
            f"{PREFIX}{i}",
            PatternType.LITERAL,
            f"Group:team-{i % 20}",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
        for i in range(1_000)
    ]
    query = (PRINCIPAL, "127.0.0.1", AclOperation.READ, RT.TOPIC, NAME)
    out: dict[str, float] = {}
    for cached in (False, True):
        authz = Authorizer() if cached else Authorizer(cache_size=0)
        authz.load(bindings)
        kind = "cached" if cached else "uncached"
        calls = 300_000 if cached else 100_000
        if not with_groups:  # the call of AuthContext before group principals
            out[f"no groups, {kind}"] = per_call_us(_call(authz.authorize, query), calls)
            continue
        for label, groups in SESSIONS.items():  # the call of AuthContext now: groups given
            out[f"{label}, {kind}"] = per_call_us(_call(authz.authorize, query, groups), calls)
    return out


def _call(authorize: Any, query: tuple, groups: frozenset[str] | None = None) -> Any:
    """`authorize` of `query` with positional arguments, as AuthContext calls it (a
    `*query, groups` call would build a tuple per call and measure that)."""
    p, h, o, r, n = query
    if groups is None:
        return lambda: authorize(p, h, o, r, n)
    return lambda: authorize(p, h, o, r, n, groups)


def _run(pythonpath: str | None, with_groups: bool) -> dict[str, float]:
    code = (
        "import json, sys; from bench.groups import _measure; "
        f"print(json.dumps(_measure({with_groups})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent.parent,
        env={**os.environ, "PYTHONPATH": pythonpath} if pythonpath else None,
    )
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", metavar="REV", help="also measure this commit, without groups")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    rounds: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as worktrees:
        before_path = None
        if args.before:
            worktree = worktrees.enter_context(commit_worktree(args.before, Path(tmp) / "before"))
            # the old tree's aclgate package, this tree's bench (the measuring code)
            before_path = f"{worktree}:{root}"
        for number in range(1, args.rounds + 1):
            if before_path is not None:
                for key, value in _run(before_path, False).items():
                    rounds.setdefault(f"before ({args.before}): {key}", []).append(value)
            for key, value in _run(None, True).items():
                rounds.setdefault(key, []).append(value)
            print(f"round {number}/{args.rounds} done", file=sys.stderr, flush=True)
    import datetime as dt

    env = {**environment(), "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}
    results = {
        "env": env,
        "rounds": rounds,
        "median_us": {k: statistics.median(v) for k, v in rounds.items()},
    }
    markdown = _markdown(results, args)
    write_results(RESULTS, "groups", results, markdown)
    print(markdown)
    return 0


def _markdown(results: dict, args: argparse.Namespace) -> str:
    medians = results["median_us"]
    lines = [
        "# The authorizer with group principals",
        "",
        f"`python -m bench.groups{' --before ' + args.before if args.before else ''} "
        f"--rounds {args.rounds}` {measured_code(results['env'])}, {results['env']['date']}. "
        "CPU µs per `authorize` call (best of 5 runs per process, median of the interleaved "
        "rounds; ranges over the rounds in brackets), on bench/authz.py's AuthorizerBenchmark "
        "ACL set plus 1,000 group ACLs.",
        "",
        "| session | µs per call | vs no groups (before, with --before) |",
        "|---|---:|---:|",
    ]
    for kind in ("uncached", "cached"):
        base = medians[f"no groups, {kind}"]
        if args.before:
            base = medians[f"before ({args.before}): no groups, {kind}"]
        for key, value in medians.items():
            if not key.endswith(f", {kind}"):
                continue
            spread = results["rounds"][key]
            lines.append(
                f"| {key} | {value:.3f} [{min(spread):.3f}-{max(spread):.3f}] | "
                f"{value / base:.2f}x |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
