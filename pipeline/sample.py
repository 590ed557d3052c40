"""Writing synthetic audit logs fast enough for a 10-million-event benchmark.

Each activity's JSON tail (everything but time, count, proxy and enforcement) is rendered
once; the per-line work is picking an activity, a timestamp and a count. Timestamps follow
a day/night curve; the first quarter of the window and one hour in the middle run in
dry-run mode (denials forwarded, `enforced: false`); about a third of allowed lines are
aggregates (`count` > 1 with `ts_first`), as the proxy writes them. Files are split by time
like the proxy's rotation and can be written in parallel.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import os
import random
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from aclgate.pipeline.sample_world import api_fields, build_world, candidate_policy, decide_all

BATCH = 50_000
AGGREGATE_SHARE = 0.33
PROXIES = ("aclgate-1", "aclgate-2", "aclgate-3")


@dataclass(frozen=True)
class SampleSpec:
    events: int
    start_us: int
    hours: float
    seed: int = 7

    @property
    def span_us(self) -> int:
        return int(self.hours * 3600 * 1_000_000)

    def dry_run(self, ts_us: int) -> bool:
        """Dry-run windows: the first quarter of the span, and one hour at 60 % of it."""
        offset = ts_us - self.start_us
        middle = int(self.span_us * 0.6)
        return offset < self.span_us // 4 or middle <= offset < middle + 3_600_000_000


def _tails(acts: Sequence[Any], decisions: Sequence[tuple]) -> list[tuple[str, str, bool]]:
    """(tail with enforced=true, tail with enforced=false, denied?) per activity."""
    out = []
    for a, (decision, rule, acl) in zip(acts, decisions, strict=True):
        key, version = api_fields(a.api)
        fields = {
            "listener": a.listener,
            "principal": a.principal,
            "host": a.host,
            "client_id": a.client_id,
            "api": a.api,
            "api_key": key,
            "api_version": version,
            "operation": a.operation,
            "resource_type": a.resource_type,
            "resource_name": a.resource_name,
            "decision": decision,
        }
        head = json.dumps(fields)[1:-1]
        rest = f', "rule": {json.dumps(rule)}, "acl": {json.dumps(acl)}}}\n'
        out.append(
            (
                f', {head}, "enforced": true{rest}',
                f', {head}, "enforced": false{rest}',
                decision == "DENIED",
            )
        )
    return out


def _diurnal_table(spec: SampleSpec, bins: int = 288) -> list[float]:
    """Cumulative traffic share per bin: busier by day (UTC), quieter at night."""
    weights = []
    for i in range(bins):
        t = spec.start_us + spec.span_us * (i + 0.5) / bins
        hour = (t / 3_600_000_000) % 24
        weights.append(1.0 + 0.8 * math.sin((hour - 8) / 24 * 2 * math.pi))
    total, cum = sum(weights), []
    acc = 0.0
    for w in weights:
        acc += w / total
        cum.append(acc)
    return cum


def _time_at(spec: SampleSpec, cum: list[float], u: float) -> int:
    """Inverse of the cumulative table: a uniform u in [0, 1) to a timestamp."""
    i = min(bisect.bisect_right(cum, u), len(cum) - 1)
    lo = cum[i - 1] if i else 0.0
    frac = (u - lo) / ((cum[i] - lo) or 1.0)
    return spec.start_us + int(spec.span_us * (i + frac) / len(cum))


class _TimeText:
    """`2026-11-21T12:00:00.123456Z` without a datetime per line (one strftime per second)."""

    def __init__(self) -> None:
        self.second = -1
        self.prefix = ""

    def __call__(self, ts_us: int) -> str:
        second, micros = divmod(ts_us, 1_000_000)
        if second != self.second:
            self.second = second
            self.prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self.prefix}.{micros:06d}Z"


def _open(path: Path, compress: bool) -> IO[str]:
    if compress:
        return gzip.open(path, "wt", encoding="utf-8", compresslevel=3)
    return open(path, "w", encoding="utf-8", buffering=1 << 20)


def write_part(spec: SampleSpec, path: str, first: int, count: int, compress: bool) -> int:
    """Lines [first, first + count) of the sample, in time order, into one file."""
    acls, acts = build_world()
    tails = _tails(acts, decide_all(acls, acts))
    cum_weights = list(_accumulate(a.weight for a in acts))
    cum = _diurnal_table(spec)
    rng = random.Random(spec.seed * 1_000_003 + first)
    text = _TimeText()
    indexes = range(len(acts))
    with _open(Path(path), compress) as out:
        done = 0
        while done < count:
            n = min(BATCH, count - done)
            picks = rng.choices(indexes, cum_weights=cum_weights, k=n)
            lines = []
            for j, pick in enumerate(picks):
                u = (first + done + j + rng.random()) / spec.events
                ts = _time_at(spec, cum, u)
                enforced_tail, dry_tail, denied = tails[pick]
                proxy = PROXIES[pick % len(PROXIES)]
                if not denied and rng.random() < AGGREGATE_SHARE:
                    n_agg = rng.randint(2, 60)
                    head = f'"ts": "{text(ts)}", "ts_first": "{text(ts - 10_000_000)}", "count": {n_agg}'
                else:
                    head = f'"ts": "{text(ts)}", "ts_first": null, "count": 1'
                tail = dry_tail if denied and spec.dry_run(ts) else enforced_tail
                lines.append(f'{{"schema_version": 1, {head}, "proxy": "{proxy}"{tail}')
            out.write("".join(lines))
            done += n
    return count


def _accumulate(values: Any) -> Any:
    total = 0.0
    for v in values:
        total += v
        yield total


def write_sample(
    spec: SampleSpec, out: str, files: int = 1, compress: bool = False, jobs: int | None = None
) -> list[str]:
    """Write the sample to `out` (a .jsonl[.gz] file, or a directory of `files` parts)."""
    target = Path(out)
    if target.name.endswith((".jsonl", ".jsonl.gz", ".json", ".log")) or target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        paths = [str(target)]
        compress = compress or target.name.endswith(".gz")
    else:
        target.mkdir(parents=True, exist_ok=True)
        suffix = ".jsonl.gz" if compress else ".jsonl"
        paths = [str(target / f"audit-{i:05d}{suffix}") for i in range(files)]
    per = [spec.events // len(paths) + (i < spec.events % len(paths)) for i in range(len(paths))]
    starts = [sum(per[:i]) for i in range(len(paths))]
    workers = max(1, min(jobs or os.cpu_count() or 1, len(paths)))
    if workers == 1:
        for path, first, count in zip(paths, starts, per, strict=True):
            write_part(spec, path, first, count, compress)
    else:
        with ProcessPoolExecutor(workers) as pool:
            futures = [
                pool.submit(write_part, spec, path, first, count, compress)
                for path, first, count in zip(paths, starts, per, strict=True)
            ]
            for future in futures:
                future.result()
    return paths


def policy_files() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The policy the sample was decided with, and the what-if demo's candidate policy."""
    acls, _ = build_world()
    return acls, candidate_policy(acls)
