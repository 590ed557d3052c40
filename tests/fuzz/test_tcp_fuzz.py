"""TCP-level fuzzing: mutated real request frames over many short connections to a running
proxy (in-process, uvloop), on PLAINTEXT (open and with ACLs), SASL (before and after a real
login) and TLS listeners, in front of a recording upstream.

After every batch (tests/fuzz/checks.py): nothing malformed and nothing the proxy had to
refuse reached the upstream, every answer a client got is a whole frame of one of its
requests in order, and every connection's end is counted under a documented kind or as a
normal close, with no internal_error. Afterwards the proxy still serves a real ApiVersions +
Metadata exchange; behind tansu, confluent-kafka produces and consumes through it.

`make test` runs FUZZ_CASES=4000 cases with FUZZ_SEED=1; `make fuzz` runs many more with a
fresh seed (docs/fuzzing.md). A failure prints the seed and the case to replay.
"""

from __future__ import annotations

import re
import uuid

from aclgate.authz.aclfile import dump_acl_file
from tests.enforce.test_admin_apis import PROFILES
from tests.scenarios import clients

from .client import Target
from .conftest import HOST, MECHANISM, PASSWORD, USER
from .corpus import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    Seed,
    blank_seeds,
    corpus_seeds,
    make_case,
    sasl_seeds,
)
from .harness import api_versions, client_context, fuzz, pick, roundtrip
from .recorder import RecordingUpstream

#: each test's share of FUZZ_CASES
SHARES = {"plaintext": 0.35, "acls": 0.15, "sasl": 0.25, "tls": 0.2, "tansu": 0.05}
#: SASL-protocol frames: the proxy terminates SASL, they never go upstream
SASL_KEYS = {SASL_HANDSHAKE, SASL_AUTHENTICATE}


def regular_seeds(advertised: dict[int, tuple[int, int]]) -> list[Seed]:
    """The corpus of every advertised API, asserted complete: a new API needs no new code
    here (blank seeds), but must be advertised to be fuzzed."""
    seeds = corpus_seeds() + blank_seeds(advertised)
    missing = set(advertised) - SASL_KEYS - {s.api_key for s in seeds}
    assert not missing, f"no seed frame for advertised API keys {sorted(missing)}"
    return seeds


# ------------------------------------------------------------------------------ PLAINTEXT


def _plaintext(
    name, proxy, upstream, runner, settings, expect_served=True, allowed_names=None
) -> None:
    target = Target(name, HOST, proxy.port)
    advertised = runner.run(api_versions(target))
    seeds = regular_seeds(advertised)
    fuzz(
        name,
        settings,
        lambda i: make_case(settings.seed, i, name, seeds, advertised),
        {name: target},
        [proxy],
        upstream,
        {name: advertised},
        advertised,
        settings.share(SHARES[name]),
        runner,
        expect_served=expect_served,
        allowed_names=allowed_names,
    )
    runner.run(roundtrip(target, proxy.port))


def test_plaintext(proxy_factory, upstream, runner, settings):
    """No ACLs, everything allowed: the most frames reach the upstream."""
    proxy = proxy_factory(upstream.bootstrap)
    _plaintext("plaintext", proxy, upstream, runner, settings)


def test_acls(proxy_factory, upstream, runner, settings, tmp_path):
    """The sans-IO fuzzer's "partial" ACLs: denials answered locally, requests stripped of
    denied entries and re-encoded; no denied name may reach the cluster."""
    acls = tmp_path / "acls.json"
    acls.write_text(dump_acl_file(PROFILES["partial"]))
    proxy = proxy_factory(upstream.bootstrap, acl_file=acls, allow_everyone_if_no_acl_found=False)
    # User:ANONYMOUS may use topics ok and zz, group g-ok, transactional id tx-ok (literal
    # ALLOWs): nothing else may be named in what reaches the cluster
    bindings = PROFILES["partial"]
    assert all(b.pattern_type.name == "LITERAL" for b in bindings)
    assert all(b.resource_type.name != "CLUSTER" for b in bindings)  # checks.stop_index
    allowed = {"acls": {b.resource_name for b in bindings}}
    _plaintext("acls", proxy, upstream, runner, settings, allowed_names=allowed)


# ----------------------------------------------------------------------------------- SASL


def test_sasl(proxy_factory, upstream, runner, settings, users_file):
    """Half the cases before authentication (mostly SASL frames, mutated; nothing may reach
    the cluster), half after a real SCRAM login (re-authentication frames included)."""
    proxy = proxy_factory(
        upstream.bootstrap,
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms=f"{MECHANISM},PLAIN",
        users_file=users_file,
        connection_failed_authentication_delay_ms=10,
    )
    target = Target("sasl", HOST, proxy.port, credentials=(MECHANISM, USER, PASSWORD))
    advertised = runner.run(api_versions(target, login=True))
    assert set(advertised) >= SASL_KEYS, advertised
    regular = regular_seeds({k: v for k, v in advertised.items() if k not in SASL_KEYS})
    sasl = sasl_seeds(MECHANISM)
    handshake = [s for s in sasl if s.name == f"SaslHandshake v1 {MECHANISM}"]
    # before authentication: about 70% SASL frames, 30% anything else
    pre = sasl * max(1, round(0.7 / 0.3 * len(regular) / len(sasl))) + regular
    post = regular + sasl

    def plan(i: int):
        if pick(settings.seed, i, [("sasl-pre", 1), ("sasl-auth", 1)]) == "sasl-pre":
            return make_case(
                settings.seed, i, "sasl-pre", pre, advertised, prefix=handshake, serves=False
            )
        return make_case(settings.seed, i, "sasl-auth", post, advertised, login=True)

    fuzz(
        "sasl",
        settings,
        plan,
        {"sasl-pre": target, "sasl-auth": target},
        [proxy],
        upstream,
        {"sasl-pre": advertised, "sasl-auth": advertised},
        {k: v for k, v in advertised.items() if k not in SASL_KEYS},
        settings.share(SHARES["sasl"]),
        runner,
    )
    runner.run(roundtrip(target, proxy.port, login=True))


# ------------------------------------------------------------------------------------ TLS


def test_tls(proxy_factory, upstream, runner, settings, tls_files):
    """Mutated frames inside TLS, and (one case in six) Kafka bytes or garbage sent to the TLS
    port without TLS: failed handshakes are counted as `tls_handshake`."""
    proxy = proxy_factory(
        upstream.bootstrap,
        listener_security_protocol="SSL",
        ssl_certfile=tls_files["cert"],
        ssl_keyfile=tls_files["key"],
        ssl_client_auth="none",
    )
    target = Target("tls", HOST, proxy.port, ssl=client_context(str(tls_files["ca"])))
    advertised = runner.run(api_versions(target))
    seeds = regular_seeds(advertised)

    def plan(i: int):
        if pick(settings.seed, i, [("tls", 5), ("tls-raw", 1)]) == "tls-raw":
            return make_case(settings.seed, i, "tls-raw", seeds, advertised, no_tls=True)
        return make_case(settings.seed, i, "tls", seeds, advertised)

    fuzz(
        "tls",
        settings,
        plan,
        {"tls": target, "tls-raw": target},
        [proxy],
        upstream,
        {"tls": advertised, "tls-raw": advertised},
        advertised,
        settings.share(SHARES["tls"]),
        runner,
    )
    runner.run(roundtrip(target, proxy.port))


# ---------------------------------------------------------------- a real broker, a real client


def test_tansu_then_real_client(tansu, proxy_factory, runner, settings):
    """The same fuzz with tansu answering (through a recording relay), then confluent-kafka
    (admin, producer, consumer group) through the same proxy (tests/scenarios/clients.py)."""
    with RecordingUpstream(relay=tansu.bootstrap) as relay:
        proxy = proxy_factory(relay.bootstrap)
        try:
            # tansu closes on some valid requests it does not implement (DeleteRecords v0):
            # unmutated cases need not be served
            _plaintext("tansu", proxy, relay, runner, settings, expect_served=False)
            failure = None
        except AssertionError as exc:  # the real client must work all the same: try it first
            failure = exc
        suffix = uuid.uuid4().hex[:8]
        ports = proxy.run(lambda: set(proxy.server.directory.proxy_ports.values()))
        clients.confluent_roundtrip(proxy.bootstrap, f"fuzz-{suffix}", f"g-{suffix}", ports)
        if failure is not None:
            raise failure


def test_documented_kinds_are_read_from_the_docs():
    """The accounting check reads the documented kinds from docs/operations.md: a parse that
    found nothing would let every kind pass."""
    from .checks import documented_kinds

    kinds = documented_kinds("aclgate_errors_total")
    assert {"malformed_request", "unsupported_api", "internal_error"} <= kinds
    assert all(re.fullmatch(r"[a-z_]+", k) for k in kinds)
    assert {"idle", "partial_request"} <= documented_kinds("aclgate_connection_timeouts_total")
