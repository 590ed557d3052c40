"""Instruction-count regression guard: the hot path may not grow past its recorded baseline.

Seconds on these shared machines move by ±20-30% between runs; callgrind's instruction counts
for the same code and inputs repeat to ~0.1% in process and ~1% through `aclgate serve`
(docs/bench.md, "Instruction counts"). This test re-counts the instructions per request of
bench/instructions.py's cases (Metadata v12, Produce v9, Produce v13, Fetch v17), through the
sans-IO session and through a running `aclgate serve`, and FAILS when any count exceeds
bench/results/instructions.json by more than its mode's margin: 2% for the sans-IO session,
5% for `aclgate serve` (a Python function call costs ~1,000 instructions all in, 0.7-1.4% of
these requests; the 8 µs regression issue 24 cites was ~10% of aclgate's CPU per request). A count more than DROP (10%) below its baseline
passes with a warning: an improvement is no defect, but the headroom it leaves would let a
later regression through, so re-record the baseline.

To change the baseline deliberately: `make bench-instructions-baseline`, and say why in the
commit message.

valgrind is a test dependency: under CI (CI=true) a missing valgrind fails the test; elsewhere
it skips with the install command.
"""

from __future__ import annotations

import json
import os
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench import instructions

DROP = 0.10
HOW_TO_UPDATE = (
    "If the change in instructions is deliberate, re-record the baseline with "
    "`make bench-instructions-baseline` and give the reason in the commit message."
)

pytestmark = pytest.mark.slow


def _require_valgrind() -> None:
    if instructions.valgrind() is not None:
        return
    message = "valgrind is not installed: apt-get install -y valgrind (or `make valgrind`)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def test_instructions_per_request_within_margin_of_baseline() -> None:
    _require_valgrind()
    baseline = json.loads(instructions.BASELINE.read_text())
    recorded = baseline["environment"]
    for key, now in (
        ("python", instructions.environment()["python"]),
        ("valgrind", instructions.valgrind_version()),
    ):
        assert recorded[key] == now, (
            f"the baseline was counted with {key} {recorded[key]}, this is {now}: counts are "
            f"only comparable on the same build. {HOW_TO_UPDATE}"
        )
    modes = list(baseline["margin"])  # the bare relay's counts are there for comparison only
    # The two callgrind runs side by side: each is one process, mostly waiting on the other.
    with ThreadPoolExecutor(len(modes)) as pool:
        futures = {m: pool.submit(instructions.MODES[m].counter, baseline["n"][m]) for m in modes}
        counted = {m: f.result() for m, f in futures.items()}
    rows, over, under = [], [], []
    for mode in modes:
        old, new = baseline["instructions_per_request"][mode], counted[mode]
        margin = baseline["margin"][mode]
        for case in instructions.CASES:
            change = new[case] / old[case] - 1
            rows.append(
                f"  {mode:6} {case:12} baseline {old[case]:>9,}  now {new[case]:>11,.0f}  "
                f"({change:+.2%}, margin +{margin:.0%})"
            )
            if change > margin:
                over.append(f"{mode} {case}")
            if change < -DROP:
                under.append(f"{mode} {case}")
    table = "\n".join(rows)
    print(f"instructions per request:\n{table}")
    assert not over, (
        f"{', '.join(over)}: more instructions per request than the recorded baseline "
        f"(bench/results/instructions.json) allows:\n{table}\n{HOW_TO_UPDATE}"
    )
    if under:
        warnings.warn(
            f"{', '.join(under)}: more than {DROP:.0%} under the baseline; re-record it "
            f"(`make bench-instructions-baseline`) so the guard keeps its margin:\n{table}",
            stacklevel=1,
        )
