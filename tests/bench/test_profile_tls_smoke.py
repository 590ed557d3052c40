"""`python -m bench.profile_tls --quick --no-plain` runs end to end against Apache Kafka and writes
well-formed results. A smoke test, not a performance test: it asserts the harness works (Kafka
and the SASL_SSL aclgate start, both tools run under perf, the samples are put in categories
whose shares add up, the handshakes and system calls are counted, the report is complete),
never how fast anything is or where the CPU goes. The figures are recorded by hand
(docs/bench.md, "Consumers, zero-copy and TLS")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.profile_tls import CATEGORIES, classify, perf_problem

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.kafka]


def test_stacks_are_put_in_the_categories():
    """The classification on hand-made stacks (leaf first), one per category."""
    libc, crypto, ssl_, py = "libc.so.6", "libcrypto.so.3", "libssl.so.3", "libpython3.11.so.1.0"
    loop = "loop.cpython-311-x86_64-linux-gnu.so"
    kernel = "[kernel.kallsyms]"
    cases = {
        "setup": [("[unknown]", crypto), ("SHA512_Update", crypto), ("PKCS5_PBKDF2_HMAC", crypto)],
        "crypto": [("[unknown]", crypto), ("EVP_DecryptUpdate", crypto), ("SSL_read_ex", ssl_)],
        "tls_layer": [
            ("ssl3_read_bytes", ssl_),
            ("SSL_read_ex", ssl_),
            ("_ssl__SSLSocket_read", "_ssl.so"),
        ],
        "copies": [
            ("__memmove_avx_unaligned_erms", libc),
            ("mem_write", crypto),
            ("BIO_write", crypto),
        ],
        "allocator": [("_int_malloc", libc), ("malloc", libc), ("PyBytes_FromStringAndSize", py)],
        "kernel": [("tcp_sendmsg_locked", kernel), ("ksys_write", kernel), ("write", libc)],
        "python": [
            ("_PyEval_EvalFrameDefault", py),
            ("PyObject_VectorcallMethod", py),
            ("run", loop),
        ],
    }
    for category, stack in cases.items():
        assert classify(stack)[0] == category, (category, classify(stack))
    # Python's C API under uvloop's SSLProtocol is the TLS layer; under the interpreter, Python
    under_ssl = [("_PyObject_Malloc", py), ("PyMemoryView_FromMemory", py), ("SSLProtocol_x", loop)]
    assert classify(under_ssl)[0] == "tls_layer"
    under_eval = [("dict_get", py), ("_PyEval_EvalFrameDefault", py), ("SSLProtocol_x", loop)]
    assert classify(under_eval)[0] == "python"
    assert set(cases) == set(CATEGORIES)


def test_a_quick_run_writes_json_and_markdown(tmp_path):
    problem = perf_problem()
    if problem:
        pytest.skip(problem)
    out = tmp_path / "results"
    run = subprocess.run(
        [sys.executable, "-m", "bench.profile_tls", "--quick", "--no-plain", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads((out / "profile_tls.json").read_text())
    assert data["config"]["modes"] == ["tls"]
    tools = ("producer", "consumer")
    for tool in tools:
        entry = data["results"]["tls"][tool]
        for kind in ("unprofiled", "profiled", "syscalls"):
            run_ = entry[kind]
            assert run_["tool"]["records"] == data["config"]["records"]
            assert run_["user_s"] + run_["system_s"] > 0
            assert run_["client_connections"] >= 1
        profile = entry["profile"]
        assert profile["samples"] > 0
        assert set(profile["share"]) == set(CATEGORIES)
        assert sum(profile["share"].values()) == pytest.approx(1.0)
        counts = entry["syscall_counts"]
        assert counts["read client" if tool == "producer" else "read upstream"]["bytes"] > 0
        assert counts["accept4 new"]["calls"] >= 1
        assert set(data["ms_per_mb"]["tls"][tool]) == set(CATEGORIES)
    loops = data["connect_loops"]
    for key in ("tls_handshake", "tls_full"):
        assert loops[key]["accepted"] == loops[key]["connections"] == data["config"]["connections"]
        assert loops[key]["cpu_ms_per_connection"] > 0
    assert loops["tls_full_profile"]["samples"] > 0

    md = (out / "profile_tls.md").read_text()
    assert md.startswith("# Profile: where aclgate's CPU goes over SASL_SSL")
    for heading in (
        "## aclgate's CPU per MB by category (ms)",
        "## Handshakes: count and cost",
        "## System calls per MB",
        "## Details by category (ms per MB)",
    ):
        assert heading in md
    for label in CATEGORIES.values():
        assert f"| {label} |" in md
