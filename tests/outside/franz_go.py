"""franz-go's own kgo test suite, fetched, built and run against any Kafka bootstrap.

franz-go (github.com/twmb/franz-go) is a widely used Go Kafka client; its package `pkg/kgo`
holds unit tests and integration tests that talk to whatever cluster KGO_SEEDS names
(helpers_test.go). The Go module proxy serves the module's source with its _test.go files, so
no git clone is needed: `go mod download` brings it (checked against the pinned hash below
and Go's checksum database), `go test -c` builds one test binary, and that binary runs as
often as wanted, once directly against Kafka and once through aclgate (docs/kafka.md, "An
outside client's own suite").

Everything lives in .cache/outside/franz-go-<version>/ (gitignored): the module cache, a
writable copy of the source (the tests run in their package directory: one reads config.go)
and the binary, which is built once and kept.

    python -m tests.outside.franz_go build             fetch and build (cached)
    python -m tests.outside.franz_go run HOST:PORT     run against a bootstrap, print counts
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

MODULE = "github.com/twmb/franz-go"
VERSION = "v1.22.3"
#: The module zip's hash as go.sum records it (sum.golang.org has the same): a changed
#: download fails the build instead of testing other code.
MODULE_SUM = "h1:RHe35s34pKefMLyL+ZYJ6mQVtfFZz4zHDHVkTyACur0="
PACKAGE = "pkg/kgo"

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "outside" / f"franz-go-{VERSION}"

#: The suite's own knobs (helpers_test.go). RF 1: a single broker. 2,000 records instead of
#: 500,000 for the ETL tests (TestGroupETL, TestTxnEtl, TestShareGroupETL): their time goes
#: to group rebalances, not records (2,000 and 20,000 take the same time).
SUITE_ENV: Mapping[str, str] = {"KGO_TEST_RF": "1", "KGO_TEST_RECORDS": "2000"}
#: The integration tests mostly wait on the broker (a run uses ~4 s of CPU in 60 s): eight
#: at a time instead of GOMAXPROCS (2) takes a third off a run.
PARALLEL = 8
#: go test's own per-run limit (a run takes about a minute): a hung test (TestTxnEtl waits
#: for ever when its transactions are refused) ends the run with a goroutine dump.
RUN_TIMEOUT = "4m"

#: Tests not run (go test -skip), each with why: environment needs the project's clusters do
#: not meet. Tests that skip themselves (SCRAM/OAUTHBEARER seeds unset, a produce v2 check)
#: do that on both sides and are compared like the others.
EXCLUDED: Mapping[str, str] = {}


class SuiteUnavailable(Exception):
    """The suite could not be fetched or built (no Go, no module proxy, a bad download)."""


def go_binary() -> str:
    """The go command: on PATH, or Go's default install directory."""
    found = shutil.which("go") or shutil.which("/usr/local/go/bin/go")
    if not found:
        raise SuiteUnavailable("no `go` on PATH or in /usr/local/go/bin (Go 1.26+ is needed)")
    return found


def go_env(cache: Path) -> dict[str, str]:
    """The environment of every go command: the module cache under `cache`, writable so
    that `rm -rf .cache` works."""
    return {
        **os.environ,
        "GOMODCACHE": str(cache / "gomod"),
        "GOFLAGS": "-modcacherw -buildvcs=false",
    }


def _go(cache: Path, *args: str, cwd: Path | None = None, timeout: float = 600) -> str:
    command = [go_binary(), *args]
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            env=go_env(cache),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise SuiteUnavailable(f"`{' '.join(command)}` took more than {timeout:.0f} s") from exc
    if done.returncode != 0:
        # `go mod download -json` reports its error in the JSON on stdout
        said = (done.stderr + done.stdout).strip()[-3000:]
        raise SuiteUnavailable(f"`{' '.join(command)}` exited {done.returncode}:\n{said}")
    return done.stdout


def build(cache: Path = CACHE) -> Path:
    """The test binary of franz-go's pkg/kgo at VERSION, fetched and built on first use."""
    binary = cache / "kgo.test"
    if binary.exists():
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    info = json.loads(_go(cache, "mod", "download", "-json", f"{MODULE}@{VERSION}", cwd=cache))
    if info.get("Error"):
        raise SuiteUnavailable(f"go mod download {MODULE}@{VERSION}: {info['Error']}")
    if info.get("Sum") != MODULE_SUM:
        raise SuiteUnavailable(
            f"{MODULE}@{VERSION} has hash {info.get('Sum')}, expected {MODULE_SUM}"
        )
    source = cache / "src"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(info["Dir"], source)
    for path in [source, *source.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    partial = cache / "kgo.test.partial"
    _go(cache, "test", "-c", "-o", str(partial), f"./{PACKAGE}", cwd=source)
    partial.rename(binary)
    return binary


@dataclass
class SuiteRun:
    """The outcome of every test (subtests too, "Parent/sub") of one run."""

    outcomes: dict[str, str] = field(default_factory=dict)  # pass, fail, skip or incomplete
    output: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0  # the package's elapsed time as go test reports it
    package: str = "incomplete"  # the package's own pass/fail

    def counts(self, top_level: bool = False) -> dict[str, int]:
        names = (n for n in self.outcomes if not top_level or "/" not in n)
        return dict(collections.Counter(self.outcomes[n] for n in names))

    def summary(self) -> str:
        return (
            f"{len(self.outcomes)} tests and subtests {self.counts()}, "
            f"of them top-level {self.counts(top_level=True)}; {self.seconds:.0f} s"
        )

    def failure_output(self, name: str, limit: int = 4000) -> str:
        return "".join(self.output.get(name, []))[-limit:]


def parse_test2json(lines: Iterable[str]) -> SuiteRun:
    """A SuiteRun from `go tool test2json` events; a test that started but never ended
    (the binary panicked or timed out) is "incomplete"."""
    run = SuiteRun()
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        action, test = event.get("Action"), event.get("Test")
        if test is None:
            if action in ("pass", "fail", "skip"):
                run.package, run.seconds = action, float(event.get("Elapsed") or 0.0)
            continue
        if action == "run":
            run.outcomes.setdefault(test, "incomplete")
        elif action in ("pass", "fail", "skip"):
            run.outcomes[test] = action
        elif action == "output":
            run.output.setdefault(test, []).append(event.get("Output", ""))
    return run


def run_suite(
    seeds: str,
    binary: Path,
    log: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 330,
) -> SuiteRun:
    """Run the whole kgo test binary against `seeds` (but EXCLUDED); `log` keeps the events."""
    command = [
        go_binary(),
        "tool",
        "test2json",
        "-t",
        str(binary),
        "-test.v=test2json",
        f"-test.parallel={PARALLEL}",
        f"-test.timeout={RUN_TIMEOUT}",
    ]
    if EXCLUDED:
        command.append("-test.skip=^(" + "|".join(EXCLUDED) + ")$")
    done = subprocess.run(
        command,
        cwd=binary.parent / "src" / PACKAGE,
        env={**go_env(binary.parent), **SUITE_ENV, **(env or {}), "KGO_SEEDS": seeds},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if log is not None:
        log.write_text(done.stdout + done.stderr)
    return parse_test2json(done.stdout.splitlines())


def differences(direct: SuiteRun, proxied: SuiteRun) -> list[tuple[str, str, str]]:
    """(test, outcome directly, outcome through the proxy) for every test whose outcomes
    differ; a test missing on one side is "absent" there."""
    names = sorted(direct.outcomes.keys() | proxied.outcomes.keys())
    pairs = (
        (n, direct.outcomes.get(n, "absent"), proxied.outcomes.get(n, "absent")) for n in names
    )
    return [(n, d, p) for n, d, p in pairs if d != p]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.outside.franz_go", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="fetch and build the test binary (cached)")
    run = sub.add_parser("run", help="run the suite against a bootstrap and print the counts")
    run.add_argument("seeds", help="HOST:PORT[,HOST:PORT...]")
    args = parser.parse_args(argv)
    try:
        binary = build()
    except SuiteUnavailable as exc:
        print(f"franz-go {VERSION}: {exc}", file=sys.stderr)
        return 1
    if args.command == "build":
        print(binary)
        return 0
    result = run_suite(args.seeds, binary)
    print(f"franz-go {VERSION} kgo against {args.seeds}: {result.summary()}")
    for name, outcome in sorted(result.outcomes.items()):
        if outcome in ("fail", "incomplete"):
            print(f"  {outcome}: {name}")
    return 0 if result.package == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
