"""CPU cost of the per-API latency histograms on the hot path (docs/bench.md).

The end-to-end latency benchmark cannot resolve a cost below a microsecond on a shared machine,
so this times the code the IO layer runs per read, with and without the histograms: the
counters alone (as before them) against begin_step + the counters + requests_done /
responses_done (proxy/ops/metrics.py, proxy/listen/connection.py). Interleaved, best of many repeats:
the minimum is the cost without the machine's stalls.

  python -m bench.histogram_cost [--out bench/results]
"""

from __future__ import annotations

import argparse
import os
import timeit
from pathlib import Path
from typing import Any

from aclgate.protocol.header import RequestHeader
from aclgate.proxy.ops.metrics import REQUEST_BYTES, REQUESTS, UPSTREAM_RESPONSES, ProxyMetrics
from bench.latency import environment
from bench.recording import measured_code, write_results


def cases() -> dict[str, Any]:
    m = ProxyMetrics()
    header = RequestHeader(0, 9, 1, "bench", False, 0)
    m.request(header, 100)  # the API's rows exist, as after the first request
    m.response(0, 10, False)

    def request_before() -> None:
        counts = m.hot.by_api.get(header.api_key) or m.api(header.api_key)
        counts[REQUESTS] += 1
        counts[REQUEST_BYTES] += 100

    def request_after() -> None:
        started = m.begin_step(m.step_requests)
        m.request(header, 100)
        m.requests_done(started)

    def answer_before() -> None:
        counts = m.hot.by_api.get(0) or m.api(0)
        counts[UPSTREAM_RESPONSES] += 1

    def answer_after() -> None:
        started = m.begin_step(m.step_responses)
        m.response(0, 10, False)
        m.responses_done(started)

    return {
        "request_before": request_before,
        "request_after": request_after,
        "answer_before": answer_before,
        "answer_after": answer_after,
    }


def measure(repeats: int = 15, number: int = 200_000) -> dict[str, float]:
    """ns per call, the best of `repeats` interleaved runs of `number` calls."""
    fns = cases()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            best[name] = min(best[name], timeit.timeit(fn, number=number) / number * 1e9)
    return {k: round(v, 1) for k, v in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="write histogram_cost.json/.md")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    ns = measure()
    env = environment()
    added = {
        "request_read": round(ns["request_after"] - ns["request_before"], 1),
        "answer_read": round(ns["answer_after"] - ns["answer_before"], 1),
    }
    lines = [
        f"Latency histograms, CPU per read with one request or answer, {measured_code(env)}, "
        f"load {load_before:.1f} on {env['cores']} cores:",
        "",
        "| Step | counters only (ns) | counters + histogram (ns) | added (ns) |",
        "|---|---|---|---|",
        f"| request read | {ns['request_before']} | {ns['request_after']} | {added['request_read']} |",
        f"| answer read | {ns['answer_before']} | {ns['answer_after']} | {added['answer_read']} |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        data = {"ns": ns, "added_ns": added, "load": load_before, "environment": env}
        write_results(args.out, "histogram_cost", data, text)


if __name__ == "__main__":
    main()
