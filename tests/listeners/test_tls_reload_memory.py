"""Certificate reloads leak nothing (issue 20): 1,000 reloads of the SSL listener's certificate
and key, through a real proxy whose new certificate is checked on real TLS connections, leave
no SSLContext behind and grow neither the traced memory (100 KB per 500 reloads at most) nor
what malloc hands out (512 KB per 500 reloads at most: OpenSSL's share, unseen by tracemalloc).

The soak (docs/bench.md) had put about 3 KB of RSS on each reload. On b17755c this test
passes as it is (about 5 KB traced and 25 KB malloc'd per 500 reloads, flat): the reload path
retains nothing per reload. It guards that it stays so: old contexts kept in a list (21 KB of
OpenSSL memory each) or 3 KB kept per reload fail it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import itertools
import os
import shutil
import ssl
import tracemalloc

from cryptography import x509

from aclgate.certs import pki
from tests.listeners.conftest import Pki
from tests.listeners.test_tls import served_certificate

RELOADS = 1000
WARM_UP = 20
#: every this many reloads a TLS connection checks that the new certificate is served
PROBE_EVERY = 100
#: traced bytes 1,000 reloads may add (measured over each half, the smaller one doubled)
MAX_GROWTH = 200 * 1024
#: the same for what malloc hands out (OpenSSL's contexts, keys and certificates live there)
MAX_MALLOC_GROWTH = 1024 * 1024


class _MallInfo2(ctypes.Structure):
    """glibc's struct mallinfo2."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            *("arena", "ordblks", "smblks", "hblks", "hblkhd"),
            *("usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"),
        )
    ]


def malloc_in_use() -> int:
    """Bytes malloc has handed out (glibc's mallinfo2): what OpenSSL keeps, which tracemalloc
    does not see; 0 without glibc."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if not hasattr(libc, "mallinfo2"):
        return 0
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def live_contexts() -> int:
    gc.collect()
    return sum(isinstance(o, ssl.SSLContext) for o in gc.get_objects())


def test_a_thousand_certificate_reloads_retain_nothing(
    scripted, proxy_factory, certs: Pki, tmp_path
):
    ca_dir = tmp_path / "ca"
    shutil.copytree(certs.dir, ca_dir)
    pairs = []  # two certificates to alternate, each installed by rename as `aclgate certs` does
    for name in ("a", "b"):
        pki.issue_server(ca_dir, dns=["localhost"], ips=["127.0.0.1"], force=True)
        serial = x509.load_pem_x509_certificate((ca_dir / "server.crt").read_bytes()).serial_number
        pairs.append((name, serial))
        for ext in ("crt", "key"):
            shutil.copy(ca_dir / f"server.{ext}", tmp_path / f"{name}.{ext}")
    proxy = proxy_factory(
        scripted.bootstrap,
        listener_security_protocol="SSL",
        ssl_certfile=ca_dir / "server.crt",
        ssl_keyfile=ca_dir / "server.key",
    )
    tls = proxy.server.security.tls
    assert tls is not None

    def reload(i: int) -> int:
        name, serial = pairs[i % 2]
        for ext in ("crt", "key"):
            staged = ca_dir / f".staged.{ext}"
            shutil.copy(tmp_path / f"{name}.{ext}", staged)
            os.utime(staged, ns=(i, i))  # a new mtime whatever the clock's resolution
            os.replace(staged, ca_dir / f"server.{ext}")
        assert proxy.run(tls.check), f"reload {i} not taken"
        return serial

    def traced() -> tuple[int, int]:
        gc.collect()
        return tracemalloc.get_traced_memory()[0], malloc_in_use()

    for i in range(WARM_UP):  # first-time allocations are not a leak
        reload(i)
    assert served_certificate(proxy.port, certs.ca).serial_number == pairs[(WARM_UP - 1) % 2][1]
    contexts = live_contexts()
    tracemalloc.start()
    try:
        # two halves: a leak grows both; a table that grows once (a global dict resized
        # while traced, its old table allocated untraced) only one of them
        marks = [traced()]
        for i in range(WARM_UP, WARM_UP + RELOADS):
            serial = reload(i)
            if i % PROBE_EVERY == 0:
                assert served_certificate(proxy.port, certs.ca).serial_number == serial
            if i == WARM_UP + RELOADS // 2 - 1:
                marks.append(traced())
        marks.append(traced())
    finally:
        tracemalloc.stop()
    assert tls.reloads == WARM_UP + RELOADS and tls.failures == 0
    assert live_contexts() <= contexts
    limits = {"traced": MAX_GROWTH, "malloc": MAX_MALLOC_GROWTH}
    for (kind, limit), column in zip(limits.items(), zip(*marks, strict=True), strict=True):
        halves = [after - before for before, after in itertools.pairwise(column)]
        assert 2 * min(halves) < limit, f"{kind}: {halves} bytes kept by each half"
