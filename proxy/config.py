"""Proxy configuration: one dataclass drives the TOML file, the command-line flags and validation.

Each field's metadata carries its help text and parser; `aclgate serve` builds its flags from
it and the TOML loader accepts exactly the same keys (snake_case, dashes also accepted), so
the two can never drift apart. Command-line flags override the file.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class ConfigError(ValueError):
    """A setting is missing or invalid; the message names the setting and the problem.

    `setting` and `problem` let `from_args` say it again the way the user wrote the setting
    (the flag, or the TOML file and key); the message itself uses the TOML key."""

    def __init__(self, message: str, *, setting: str | None = None, problem: str | None = None):
        super().__init__(message)
        self.setting = setting
        self.problem = problem if problem is not None else message

    @classmethod
    def about(cls, setting: str, problem: str, sep: str = ": ") -> ConfigError:
        """`setting: problem` (or `setting problem` with sep=" "), keeping both parts."""
        return cls(f"{setting}{sep}{problem}", setting=setting, problem=problem)


def parse_host_port(value: str, default_host: str | None = None) -> tuple[str, int]:
    """`host:port`, `[v6::addr]:port`, or `:port` (with a default host)."""
    text = value.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
    if not sep:
        raise ConfigError(f"{value!r} is not HOST:PORT")
    host = host or default_host or ""
    if not host:
        raise ConfigError(f"{value!r} has no host")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"{value!r}: port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"{value!r}: port {number} is out of range")
    return host, number


def parse_node_port(value: str) -> tuple[int, int]:
    node, sep, port = value.partition("=")
    try:
        if not sep:
            raise ValueError
        node_id, number = int(node), int(port)
    except ValueError:
        raise ConfigError(f"{value!r} is not NODE_ID=PORT") from None
    if not 1 <= number <= 65535:
        raise ConfigError(f"{value!r}: port {number} is out of range")
    return node_id, number


def parse_port_range(value: str) -> tuple[int, int]:
    first, sep, last = value.partition("-")
    try:
        lo, hi = int(first), int(last)
    except ValueError:
        raise ConfigError(f"{value!r} is not FIRST-LAST (e.g. 19092-19191)") from None
    if not sep or not 1 <= lo <= hi <= 65535:
        raise ConfigError(f"{value!r} is not a port range FIRST-LAST with FIRST <= LAST")
    return lo, hi


def parse_workers(value: str | int) -> int:
    """A worker count, or `auto`: the cores this process may run on (its CPU affinity)."""
    import os

    if isinstance(value, str) and value.strip().lower() == "auto":
        return (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1
        )
    try:
        count = int(value)
    except ValueError:
        raise ConfigError(f"{value!r} is not a number of workers or `auto`") from None
    if count < 1:
        raise ConfigError(f"{value!r}: at least 1 worker")
    return count


def parse_api_cap(value: str) -> tuple[int, int]:
    key, sep, version = value.partition("=")
    try:
        if not sep:
            raise ValueError
        return int(key), int(version)
    except ValueError:
        raise ConfigError(f"{value!r} is not API_KEY=MAX_VERSION (e.g. 1=12)") from None


def parse_request_limit(value: str) -> tuple[int, int]:
    """API=BYTES (--max-request-bytes): the API by name (CreateAcls) or key (30)."""
    from aclgate.protocol.versions import API_NAMES

    api, sep, size = value.partition("=")
    keys = {name.lower(): key for key, name in API_NAMES.items()}
    key = int(api) if api.strip().isdigit() else keys.get(api.strip().lower())
    if not sep or key not in API_NAMES:
        raise ConfigError(
            f"{value!r} is not API=BYTES with a Kafka API name or key (e.g. CreateAcls=1MiB)"
        )
    limit = parse_size(size)
    if limit <= 0:
        raise ConfigError(f"{value!r}: the limit must be positive")
    return key, limit


def parse_size(value: str | int) -> int:
    """Bytes, with an optional KiB/MiB/GiB suffix."""
    if isinstance(value, int):
        return value
    text = value.strip()
    for suffix, factor in (("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)):
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], factor
            break
    else:
        scale = 1
    try:
        return int(float(text) * scale)
    except ValueError:
        raise ConfigError(f"{value!r} is not a size in bytes (e.g. 104857600 or 100MiB)") from None


def _setting(
    default: Any = None,
    *,
    help: str,
    parse: Callable[[str], Any] | None = None,
    metavar: str | None = None,
    multiple: bool = False,
    choices: Sequence[str] | None = None,
    flag: str | None = None,
    boolean: bool = False,
    lower: bool = False,
) -> Any:
    meta = {
        "help": help,
        "parse": parse,
        "metavar": metavar,
        "multiple": multiple,
        "choices": choices,
        "flag": flag,
        "boolean": boolean,
        "lower": lower,
    }
    if multiple or isinstance(default, dict):
        factory = (lambda d=default: type(d)(d)) if default is not None else list
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def parse_share(text: str) -> float:
    """A share of a whole: a number greater than 0 and at most 1."""
    try:
        share = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not 0 < share <= 1:
        raise ValueError(f"{text!r} is not a share greater than 0 and at most 1")
    return share


@dataclass
class ProxyConfig:
    """Everything `aclgate serve` needs; see `aclgate serve --help`."""

    upstream: list[tuple[str, int]] = _setting(
        multiple=True,
        parse=parse_host_port,
        metavar="HOST:PORT",
        help="bootstrap server(s) of the Kafka cluster to protect: repeat the flag or give a "
        "comma-separated list like Kafka's bootstrap.servers; tried in order",
    )
    listen: tuple[str, int] = _setting(
        ("127.0.0.1", 9092),
        parse=lambda v: parse_host_port(v, "0.0.0.0"),
        metavar="HOST:PORT",
        help="where clients connect: the bootstrap address you give them (default 127.0.0.1:9092)",
    )
    advertised_host: str | None = _setting(
        metavar="HOST",
        help="host name clients are told to use for the per-broker ports "
        "(default: the --listen host, or 127.0.0.1 when listening on 0.0.0.0)",
    )
    node_port: dict[int, int] = _setting(
        {},
        multiple=True,
        parse=parse_node_port,
        metavar="NODE_ID=PORT",
        help="fixed proxy port for one upstream broker id (repeatable)",
    )
    broker_ports: tuple[int, int] | None = _setting(
        parse=parse_port_range,
        metavar="FIRST-LAST",
        help="proxy ports for broker ids: broker N gets FIRST+N (FIRST + N mod the range's size "
        "when N is larger), so every aclgate in front of one cluster hands out the same port for "
        "the same broker whatever order brokers appear in (default: ephemeral ports chosen by "
        "the OS, which differ between instances and restarts)",
    )
    metrics_listen: tuple[str, int] | None = _setting(
        parse=lambda v: parse_host_port(v, "0.0.0.0"),
        metavar="HOST:PORT",
        help="serve /metrics (Prometheus), /healthz and /readyz here (default: off)",
    )
    log_level: str = _setting(
        "INFO",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="log verbosity (default INFO)",
    )
    max_frame_bytes: int = _setting(
        104_857_600,
        parse=parse_size,
        metavar="BYTES",
        help="largest request accepted, like Kafka's socket.request.max.bytes (default 100MiB)",
    )
    max_request_bytes: dict[int, int] = _setting(
        {},
        multiple=True,
        parse=parse_request_limit,
        metavar="API=BYTES",
        help="largest request of one API, e.g. AlterPartitionReassignments=16MiB (repeatable); "
        "default 1MiB (less for some APIs, e.g. Fetch 512KiB, Metadata 256KiB), JoinGroup 8MiB, "
        "while Produce and SyncGroup have only --max-frame-bytes (Kafka has no per-API limit; "
        "every API's limit: docs/apis.md)",
    )
    max_in_flight: int = _setting(
        1000,
        parse=int,
        metavar="N",
        help="requests in flight per connection before the proxy stops reading (default 1000)",
    )
    max_connections: int = _setting(
        0,
        parse=int,
        metavar="N",
        help="client connections the proxy holds at most, like Kafka's max.connections; past "
        "it new connections are closed at once (default 0: no limit)",
    )
    max_connections_per_ip: int = _setting(
        0,
        parse=int,
        metavar="N",
        help="client connections from one address at most, like Kafka's "
        "max.connections.per.ip; not applied to trusted PROXY protocol senders (default 0: "
        "no limit)",
    )
    max_connections_per_principal: int = _setting(
        0,
        parse=int,
        metavar="N",
        help="client connections of one SASL or mTLS principal at most (Kafka has no such "
        "limit); past it a SASL login is answered SASL_AUTHENTICATION_FAILED and an mTLS "
        "connection is closed at once (default 0: no limit)",
    )
    max_connection_creation_rate: float = _setting(
        0.0,
        parse=float,
        metavar="PER_SECOND",
        help="new connections per second from one client address at most, like Kafka's "
        "max.connection.creation.rate per IP (KIP-612); past it new connections are closed at "
        "once; not applied to trusted PROXY protocol senders (default 0: no limit)",
    )
    connections_max_idle_ms: int = _setting(
        600_000,
        parse=int,
        metavar="MS",
        help="close a client connection after this long with no bytes in either direction and "
        "no request in flight, like Kafka's connections.max.idle.ms (default 600000)",
    )
    authentication_timeout_ms: int = _setting(
        30_000,
        parse=int,
        metavar="MS",
        help="close a connection that has not completed SASL authentication (or sent its PROXY "
        "protocol header) this long after it was opened (default 30000)",
    )
    partial_request_timeout_ms: int = _setting(
        30_000,
        parse=int,
        metavar="MS",
        help="close a connection that has sent part of a request and then nothing for this "
        "long: a half-sent frame must not hold a socket forever (default 30000)",
    )
    upstream_check_interval: float = _setting(
        5.0,
        parse=float,
        metavar="SECONDS",
        help="how often the proxy asks the cluster for its brokers, which also tells /readyz "
        "whether the cluster is reachable (default 5)",
    )
    splice_min_bytes: int = _setting(
        131_072,
        parse=parse_size,
        metavar="BYTES",
        help="relay the record bytes of an answer in the kernel (splice(2), Linux, plain TCP on "
        "both sides) when at least this many of them are still to come; 0 turns it off "
        "(default 128KiB; docs/design.md, 'Zero-copy fetch answers')",
    )
    api_version_cap: dict[int, int] = _setting(
        {},
        multiple=True,
        parse=parse_api_cap,
        metavar="API_KEY=MAX",
        help="advertise at most this version of an API, e.g. 1=12 (Fetch without topic ids) "
        "(repeatable)",
    )
    connect_timeout: float = _setting(
        10.0, parse=float, metavar="SECONDS", help="upstream connect timeout (default 10)"
    )
    shutdown_grace: float = _setting(
        10.0,
        parse=float,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT: stop accepting connections and reading requests, then wait up "
        "to this long for the responses already in flight before closing (default 10; 0: close "
        "at once, losing them)",
    )
    workers: int = _setting(
        1,
        parse=parse_workers,
        metavar="N",
        help="proxy processes sharing every listening port (SO_REUSEPORT), each with its own "
        "upstream connections, kept running by a supervisor that serves the summed /metrics "
        "and /readyz; `auto`: one per usable core (default 1: no supervisor). More than 1 "
        "needs a fixed --listen port and --broker-ports or --node-port (docs/operations.md)",
    )

    # ------------------------------------------------------------------------ policy
    acl_file: Path | None = _setting(
        parse=Path,
        metavar="PATH",
        help="the ACL file (JSON; manage it with `aclgate acls --acl-file PATH`); reloaded when it "
        "changes, a broken file keeps the previous policy. Without it only super users (and "
        "--allow-everyone-if-no-acl-found) get through",
    )
    acl_store: str = _setting(
        "file",
        choices=("file", "kafka"),
        lower=True,
        help="where the ACLs live: file (--acl-file, polled) or kafka (an ordered ACL log in a "
        "Kafka topic shared by a fleet of proxies) (default file); the ACL Admin API "
        "(kafka-acls --bootstrap-server) changes this store",
    )
    acl_file_missing_ok: bool = _setting(
        False,
        boolean=True,
        help="start with an empty policy when --acl-file does not exist yet (it is loaded when it appears)",
    )
    delete_acls_max_share: float | None = _setting(
        parse=parse_share,
        metavar="SHARE",
        help="refuse a DeleteAcls request (kafka-acls --remove, Admin.deleteAcls) that would "
        "remove every ACL, or more than this share of them (0 < SHARE <= 1, e.g. 0.5), with "
        "POLICY_VIOLATION (44) and a failed acl_change audit event; off by default, so the "
        'ACL Admin API stays Kafka\'s (docs/authz.md, "The DeleteAcls guard")',
    )
    early_start: bool = _setting(
        False,
        boolean=True,
        help="open the client listener before the ACL store has loaded (Kafka's "
        "early.start.listeners): super users are served at once; every other principal's "
        "connection is closed at its first request that needs a decision, so the client "
        "connects again with its backoff, until the policy is in force (default: the "
        "listener opens once it is)",
    )
    acl_topic: str = _setting(
        "__aclgate_acls",
        metavar="NAME",
        help="--acl-store kafka: the ACL topic (one partition, compacted; created if missing; "
        "hidden from and denied to everyone but super users through the proxy; default "
        "__aclgate_acls)",
    )
    acl_bootstrap: str | None = _setting(
        metavar="HOST:PORT,...",
        help="--acl-store kafka: the cluster holding the ACL topic (default: the --upstream "
        "cluster), reached with the proxy's own upstream identity and security settings",
    )
    acl_topic_replication_factor: int | None = _setting(
        parse=int,
        metavar="N",
        help="--acl-store kafka: replication factor of the ACL topic when aclgate creates it "
        "(default: the smaller of 3 and the number of brokers)",
    )
    acl_topic_skip_offset: list[int] = _setting(
        multiple=True,
        parse=int,
        metavar="OFFSET",
        help="--acl-store kafka: skip the record at this offset of the ACL topic (repeatable): "
        "the way past an undecodable record, once you have checked what it was (docs/authz.md)",
    )
    acl_transactional_id: str | None = _setting(
        metavar="ID",
        help="--acl-store kafka: the transactional id this instance writes ACL changes with. "
        "Stable per instance, so that a restarted instance at once aborts a change its killed "
        "predecessor left open (which would otherwise hold every instance's reader back until "
        "it times out); unique in the fleet, or two instances fence each other's changes "
        "(default aclgate-acls-HOSTNAME-PORT, PORT of --listen; random with --listen port 0; "
        "--workers appends -worker-N)",
    )
    acl_store_max_staleness_seconds: float = _setting(
        300.0,
        parse=float,
        metavar="SECONDS",
        help="/readyz answers 503 once the ACL store has not been in step with its source for "
        "longer than this (kafka: the ACL topic out of reach; default 300: rides out a rolling "
        "restart of the ACL cluster, bounds how long a cut-off instance enforces a policy the "
        "fleet has since changed; 0: never). A degraded store is unready at once",
    )
    super_user: list[str] = _setting(
        multiple=True,
        metavar="PRINCIPAL",
        help="principal allowed everything, e.g. User:admin (repeatable; like Kafka's super.users)",
    )
    allow_everyone_if_no_acl_found: bool = _setting(
        False,
        boolean=True,
        help="allow a request on a resource that has no ACL at all (Kafka's setting of the same "
        "name; off by default: then only super users may touch resources without ACLs)",
    )
    acl_host_cidr: bool = _setting(
        False,
        boolean=True,
        help="an ACL host with / is a network, IPv4 10.0.0.0/8 or IPv6 2001:db8::/32, matching "
        "every client address in it (KIP-1276, accepted for Kafka 4.4; beyond Kafka 4.3.1, "
        "which compares hosts as strings); a host with / that is no network is refused by "
        "CreateAcls (INVALID_REQUEST) and makes the ACL file or ACL topic unloadable. Off by "
        "default: such a host is a literal string, as in Kafka 4.3.1. Set it alike on every "
        'instance of a fleet (docs/authz.md, "CIDR hosts (KIP-1276, opt-in)")',
    )
    mode: str = _setting(
        "enforce",
        choices=("enforce", "dry-run"),
        lower=True,
        help="enforce: deny what the ACLs deny. dry-run: decide, audit and count, but forward "
        "everything untouched (audit events say enforced=false) (default enforce)",
    )
    dry_run_principal: list[str] = _setting(
        multiple=True,
        metavar="PRINCIPAL",
        help="in enforce mode, only observe this principal (repeatable): its denials are audited "
        "with enforced=false and forwarded, everyone else is enforced (docs/operations.md)",
    )
    dry_run_resource: list[str] = _setting(
        multiple=True,
        metavar="TYPE:PATTERN:NAME",
        help="in enforce mode, only observe requests on these resources (repeatable), e.g. "
        "TOPIC:PREFIXED:payments. or GROUP:LITERAL:billing",
    )
    dry_run_file: Path | None = _setting(
        parse=Path,
        metavar="PATH",
        help='more dry-run principals and resources in a JSON file ({"principals": [...], '
        '"resources": [...]}), reloaded when it changes like the ACL file; a broken file '
        "keeps the previous scope, a missing one adds nothing",
    )
    audit_file: Path | None = _setting(
        parse=Path,
        metavar="PATH",
        help="write audit events (JSON Lines) here; rotated by size, rotated files gzipped",
    )
    audit_format: str = _setting(
        "aclgate",
        choices=("aclgate", "cloudevents", "ocsf"),
        lower=True,
        help="the format of every audit line, in --audit-file and --audit-topic alike: aclgate "
        "(the events of docs/audit.md), cloudevents (CloudEvents 1.0 JSON, the event as its "
        '`data`) or ocsf (OCSF 1.8.0 API Activity); docs/audit.md, "Formats" (default aclgate)',
    )
    audit_max_bytes: int = _setting(
        100 * 1024 * 1024,
        parse=parse_size,
        metavar="BYTES",
        help="rotate the audit file at this size (default 100MiB)",
    )
    audit_keep: int = _setting(
        0,
        parse=int,
        metavar="N",
        help="rotated audit files to keep, oldest deleted first (default 0: keep all; the "
        "analytics jobs read them, so delete them yourself once processed)",
    )
    audit_window: float = _setting(
        10.0,
        parse=float,
        metavar="SECONDS",
        help="allowed decisions are aggregated per window of this length (default 10)",
    )
    proxy_name: str | None = _setting(
        metavar="NAME", help="this instance's name in audit events (default HOST:PORT of --listen)"
    )
    audit_topic: str | None = _setting(
        metavar="NAME",
        help="also send every audit event to this Kafka topic (key: the principal; value: the "
        "JSON line of docs/audit.md), with or without --audit-file; created with the cluster's "
        "defaults if missing; hidden from and denied to everyone but super users through the "
        "proxy. Lines the topic cannot take are kept in --audit-spool and sent when it can",
    )
    audit_bootstrap: str | None = _setting(
        metavar="HOST:PORT,...",
        help="--audit-topic: the cluster holding it (default: the --upstream cluster), reached "
        "with the proxy's own upstream identity and security settings",
    )
    audit_spool: Path | None = _setting(
        parse=Path,
        metavar="DIR",
        help="--audit-topic: directory of the lines the topic has not taken yet, sent oldest "
        "first when it can (default: _<audit file name>-spool beside --audit-file; needed "
        "without --audit-file)",
    )
    audit_spool_max_bytes: int = _setting(
        256 * 1024 * 1024,
        parse=parse_size,
        metavar="BYTES",
        help="--audit-topic: the spool's size limit; past it lines are lost, counted in "
        "aclgate_audit_sink_dropped_total and logged (default 256MiB)",
    )
    audit_delivery_timeout: float = _setting(
        10.0,
        parse=float,
        metavar="SECONDS",
        help="--audit-topic: how long a line may wait for the topic before it goes to the "
        "spool (librdkafka's message.timeout.ms) (default 10)",
    )

    # --------------------------------------------------------- client-side security
    listener_security_protocol: str = _setting(
        "PLAINTEXT",
        choices=SECURITY_PROTOCOLS,
        help="how clients connect (Kafka's names): PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; every "
        "per-broker port uses the same (default PLAINTEXT: principal User:ANONYMOUS)",
    )
    ssl_certfile: Path | None = _setting(
        parse=Path,
        metavar="PEM",
        help="server certificate (chain) for SSL/SASL_SSL listeners; reloaded when it changes",
    )
    ssl_keyfile: Path | None = _setting(
        parse=Path, metavar="PEM", help="private key of --ssl-certfile; reloaded when it changes"
    )
    ssl_cafile: Path | None = _setting(
        parse=Path,
        metavar="PEM",
        help="CAs trusted for client certificates (needed for --ssl-client-auth requested|required)",
    )
    ssl_client_auth: str = _setting(
        "none",
        choices=("none", "requested", "required"),
        lower=True,
        help="client certificates, as Kafka's ssl.client.auth (default none)",
    )
    ssl_principal_mapping_rules: str = _setting(
        "DEFAULT",
        metavar="RULES",
        help="Kafka's ssl.principal.mapping.rules, e.g. 'RULE:^CN=([^,]+),OU=eng,.*$/$1/L,DEFAULT'",
    )
    ssl_group_mapping_rules: str | None = _setting(
        metavar="RULES",
        help="SSL listeners: groups from the client certificate, in ssl.principal.mapping.rules' "
        "syntax over each value --ssl-group-from selects (default: the RFC 2253 subject); "
        "every rule that matches gives a group (Group:NAME), DEFAULT the value itself, e.g. "
        "'RULE:^.*OU=([^,]+),O=example$/$1/L' (docs/identity.md, \"Groups\"; default: no "
        "certificate groups)",
    )
    ssl_group_from: list[str] = _setting(
        multiple=True,
        metavar="SOURCE",
        help="SSL listeners: the certificate values the groups come from (repeatable): DN, a "
        "subject attribute (OU, O, CN, DC, L, ST, C, STREET, UID: one value each, so several "
        "OUs give several groups) or SAN:URI, SAN:DNS, SAN:EMAIL; each is a group as it is, or "
        "rewritten by --ssl-group-mapping-rules (default DN when rules are given)",
    )
    sasl_mechanisms: str = _setting(
        "SCRAM-SHA-512",
        metavar="LIST",
        help="comma-separated SASL mechanisms on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, "
        "OAUTHBEARER (default SCRAM-SHA-512)",
    )
    users_file: Path | None = _setting(
        parse=Path,
        metavar="PATH",
        help="credentials for PLAIN and SCRAM (manage with `aclgate users`); re-read when it changes",
    )
    sasl_oauthbearer_jwks_file: Path | None = _setting(
        parse=Path, metavar="PATH", help="JWKS (JSON) with the keys that sign OAUTHBEARER tokens"
    )
    sasl_oauthbearer_jwks_endpoint_url: str | None = _setting(
        metavar="URL",
        help="https:// URL of the identity provider's JWKS (Kafka's "
        "sasl.oauthbearer.jwks.endpoint.url): fetched at start, refreshed on a schedule and when "
        "a token names an unknown key id; the last good keys stay when it is down",
    )
    sasl_oauthbearer_oidc_discovery_url: str | None = _setting(
        metavar="URL",
        help="https:// URL of an OpenID Connect discovery document "
        "(.../.well-known/openid-configuration): its jwks_uri is the JWKS endpoint",
    )
    sasl_oauthbearer_jwks_endpoint_refresh_ms: int = _setting(
        3_600_000,
        parse=int,
        metavar="MS",
        help="fetch the JWKS this often (Kafka's sasl.oauthbearer.jwks.endpoint.refresh.ms; "
        "default 3600000)",
    )
    sasl_oauthbearer_jwks_endpoint_retry_backoff_ms: int = _setting(
        100,
        parse=int,
        metavar="MS",
        help="first wait before fetching the JWKS again after a failure, doubling each time "
        "(Kafka's sasl.oauthbearer.jwks.endpoint.retry.backoff.ms; default 100)",
    )
    sasl_oauthbearer_jwks_endpoint_retry_backoff_max_ms: int = _setting(
        10_000,
        parse=int,
        metavar="MS",
        help="longest wait between JWKS fetch retries, how long the first fetch is retried at "
        "start, and the least time between two fetches for tokens with unknown key ids "
        "(Kafka's sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms; default 10000)",
    )
    sasl_oauthbearer_ssl_cafile: Path | None = _setting(
        parse=Path,
        metavar="PEM",
        help="CAs to verify the JWKS and discovery endpoints' certificates (default: system CAs)",
    )
    sasl_oauthbearer_expected_audience: list[str] = _setting(
        multiple=True, metavar="AUD", help="accept tokens for this audience (repeatable)"
    )
    sasl_oauthbearer_expected_issuer: str | None = _setting(
        metavar="ISS", help="accept tokens from this issuer only"
    )
    sasl_oauthbearer_sub_claim_name: str = _setting(
        "sub", metavar="CLAIM", help="token claim holding the principal name (default sub)"
    )
    sasl_oauthbearer_groups_claim_name: str | None = _setting(
        metavar="CLAIM",
        help="token claim holding the session's groups (Group:NAME): a top-level claim, or a "
        "dot-separated path into nested objects such as realm_access.roles; a string is one "
        "group, an array of strings one each, any other type fails the login "
        '(docs/identity.md, "Groups"; default: no groups from tokens)',
    )
    sasl_oauthbearer_clock_skew_seconds: int = _setting(
        30, parse=int, metavar="S", help="allowed clock skew for exp/nbf (default 30)"
    )
    connections_max_reauth_ms: int = _setting(
        0,
        parse=int,
        metavar="MS",
        help="SASL session lifetime; clients re-authenticate before it ends (KIP-368; default 0 = never)",
    )
    connection_failed_authentication_delay_ms: int = _setting(
        100,
        parse=int,
        metavar="MS",
        help="delay before closing a connection whose authentication failed (default 100)",
    )
    proxy_protocol: bool = _setting(
        False,
        boolean=True,
        help="expect a PROXY protocol v1/v2 header from --proxy-protocol-trusted peers (load balancers); "
        "its source address is then the client host for ACLs and audit",
    )
    proxy_protocol_trusted: list[str] = _setting(
        multiple=True, metavar="CIDR", help="peers allowed to send a PROXY header (repeatable)"
    )
    ldap_url: str | None = _setting(
        metavar="URL[,URL...]",
        help="look up the groups of every SASL or mTLS user in this LDAP directory (Active "
        "Directory, OpenLDAP): ldap:// or ldaps:// URLs, tried in order; each group found is "
        "the principal Group:NAME for the ACLs, added to the session's other groups "
        '(docs/identity.md, "Groups from LDAP"; default: off)',
    )
    ldap_bind_dn: str | None = _setting(
        metavar="DN",
        help="--ldap-url: the DN the proxy binds as (default: an anonymous bind)",
    )
    ldap_bind_password_file: Path | None = _setting(
        parse=Path,
        metavar="PATH",
        help="--ldap-url: file holding the password of --ldap-bind-dn (first line); re-read "
        "for each new directory connection",
    )
    ldap_user_search_base: str | None = _setting(
        metavar="DN",
        help="--ldap-url: where users are searched for (subtree) with --ldap-user-filter; "
        "or give --ldap-user-dn-template",
    )
    ldap_user_filter: str = _setting(
        "(uid={user})",
        metavar="FILTER",
        help="--ldap-url: the filter that finds a user under --ldap-user-search-base; {user} is "
        "the principal's name after User:, escaped (default (uid={user}); Active Directory: "
        "(sAMAccountName={user}))",
    )
    ldap_user_dn_template: str | None = _setting(
        metavar="TEMPLATE",
        help="--ldap-url: the user's DN made from its name instead of a search, e.g. "
        "uid={user},ou=people,dc=example,dc=com ({user} escaped as an RDN value)",
    )
    ldap_group_search_base: str | None = _setting(
        metavar="DN",
        help="--ldap-url: where groups are searched for (subtree) with --ldap-group-filter",
    )
    ldap_group_filter: str = _setting(
        "(member={dn})",
        metavar="FILTER",
        help="--ldap-url: the filter that finds a user's groups; {dn} is the user's DN, {user} "
        "its name, both escaped (default (member={dn}); posixGroup: (memberUid={user}); both: "
        "(|(member={dn})(memberUid={user})))",
    )
    ldap_group_name_attribute: str = _setting(
        "cn",
        metavar="ATTRIBUTE",
        help="--ldap-url: the group attribute that names it: Group:<its value> (default cn)",
    )
    ldap_nested_groups: bool = _setting(
        False,
        boolean=True,
        help="--ldap-url: also the groups of the user's groups, and theirs, found with "
        "--ldap-group-filter's {dn} set to a group's DN (up to 8 levels; default off)",
    )
    ldap_cache_ttl: float = _setting(
        300.0,
        parse=float,
        metavar="SECONDS",
        help="--ldap-url: how long a user's groups are used before the directory is asked "
        "again; an older answer is still used while it is asked, in the background, and "
        "open connections follow the new answer (default 300)",
    )
    ldap_max_stale: float = _setting(
        900.0,
        parse=float,
        metavar="SECONDS",
        help="--ldap-url: while the directory cannot be reached, a user's last known groups are "
        "used until they are this old; after that the user's sessions have no groups from "
        "the directory (fail closed) and /readyz answers 503 (default 900; at least "
        "--ldap-cache-ttl)",
    )
    ldap_cache_max_entries: int = _setting(
        10_000,
        parse=int,
        metavar="N",
        help="--ldap-url: users whose groups are kept at most; past it the least recently "
        "used are dropped (default 10000)",
    )
    ldap_timeout: float = _setting(
        5.0,
        parse=float,
        metavar="SECONDS",
        help="--ldap-url: the longest wait to connect to the directory, and for each of its "
        "answers (default 5)",
    )
    ldap_start_tls: bool = _setting(
        False,
        boolean=True,
        help="--ldap-url: upgrade ldap:// connections with StartTLS (default off); ldaps:// "
        "URLs are TLS from the start; certificates are verified either way",
    )
    ldap_ssl_cafile: Path | None = _setting(
        parse=Path,
        metavar="PEM",
        help="--ldap-url: CAs to verify the directory's certificate (default: system CAs)",
    )

    # ------------------------------------------------------------- upstream security
    upstream_security_protocol: str = _setting(
        "PLAINTEXT",
        choices=SECURITY_PROTOCOLS,
        help="how the proxy connects to the cluster (default PLAINTEXT)",
    )
    upstream_sasl_mechanism: str = _setting(
        "SCRAM-SHA-512",
        choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
        help="the proxy's own SASL mechanism towards the cluster (default SCRAM-SHA-512; "
        "OAUTHBEARER: a token from --upstream-sasl-oauthbearer-token-endpoint-url)",
    )
    upstream_sasl_oauthbearer_token_endpoint_url: str | None = _setting(
        metavar="URL",
        help="https:// OAuth token endpoint for the proxy's own OAUTHBEARER login (client "
        "credentials grant; Kafka's sasl.oauthbearer.token.endpoint.url)",
    )
    upstream_sasl_oauthbearer_client_id: str | None = _setting(
        metavar="ID", help="the proxy's OAuth client id at the token endpoint"
    )
    upstream_sasl_oauthbearer_client_secret_file: Path | None = _setting(
        parse=Path,
        metavar="PATH",
        help="file holding the proxy's OAuth client secret (first line); re-read when it changes",
    )
    upstream_sasl_oauthbearer_scope: str | None = _setting(
        metavar="SCOPE", help="scope to ask the token endpoint for (default: none)"
    )
    upstream_sasl_oauthbearer_ssl_cafile: Path | None = _setting(
        parse=Path,
        metavar="PEM",
        help="CAs to verify the token endpoint's certificate (default: system CAs)",
    )
    upstream_sasl_login_refresh_window_factor: float = _setting(
        0.8,
        parse=float,
        metavar="F",
        help="fetch a new token once this fraction of the current one's lifetime has passed "
        "(Kafka's sasl.login.refresh.window.factor; default 0.8)",
    )
    upstream_sasl_username: str | None = _setting(
        metavar="NAME", help="the proxy's own user on the cluster"
    )
    upstream_sasl_password_file: Path | None = _setting(
        parse=Path, metavar="PATH", help="file holding the proxy's own password (first line)"
    )
    upstream_ssl_cafile: Path | None = _setting(
        parse=Path,
        metavar="PEM",
        help="CAs to verify the cluster's certificates (default: system CAs)",
    )
    upstream_ssl_certfile: Path | None = _setting(
        parse=Path, metavar="PEM", help="client certificate for an mTLS cluster"
    )
    upstream_ssl_keyfile: Path | None = _setting(
        parse=Path, metavar="PEM", help="key of --upstream-ssl-certfile"
    )
    upstream_ssl_check_hostname: bool = _setting(
        True,
        boolean=True,
        help="verify the cluster's host names (Kafka's ssl.endpoint.identification.algorithm=https; on by default)",
    )
    #: where each setting given by the user came from (from_args), so that a later error (a
    #: port in use) names it as it was written; not a setting (no help), not compared
    origins: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)

    # ------------------------------------------------------------------ derived values

    @property
    def audit_spool_dir(self) -> Path | None:
        """Where the audit topic's spool lives: --audit-spool, or beside the audit file."""
        if self.audit_spool is not None:
            return self.audit_spool
        if self.audit_file is None:
            return None
        return self.audit_file.with_name(f"_{self.audit_file.stem}-spool")

    @property
    def client_host(self) -> str:
        """The host clients are told to connect to for per-broker ports."""
        if self.advertised_host:
            return self.advertised_host
        host = self.listen[0]
        return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host

    def validate(self) -> ProxyConfig:
        if not self.upstream:
            raise ConfigError("upstream: at least one --upstream HOST:PORT is required")
        ports = list(self.node_port.values())
        if len(set(ports)) != len(ports):
            raise ConfigError.about("node_port", "two broker ids share a port")
        if self.listen[1] in ports:
            raise ConfigError.about("node_port", f"port {self.listen[1]} is also the --listen port")
        if self.broker_ports and self.broker_ports[0] <= self.listen[1] <= self.broker_ports[1]:
            raise ConfigError.about("broker_ports", "the range contains the --listen port")
        if self.workers > 1:
            self._validate_workers()
        for name in ("max_frame_bytes", "max_in_flight"):
            if getattr(self, name) <= 0:
                raise ConfigError(
                    f"{name} must be positive", setting=name, problem="must be positive"
                )
        for name in (
            "connect_timeout",
            "audit_window",
            "audit_delivery_timeout",
            "audit_spool_max_bytes",
            "connections_max_idle_ms",
            "authentication_timeout_ms",
            "partial_request_timeout_ms",
            "upstream_check_interval",
        ):
            if not getattr(self, name) > 0:
                raise ConfigError(
                    f"{name} must be positive", setting=name, problem="must be positive"
                )
        for name in (
            "max_connections",
            "max_connections_per_ip",
            "max_connection_creation_rate",
            "max_connections_per_principal",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(
                    f"{name} must be 0 (no limit) or more",
                    setting=name,
                    problem="must be 0 (no limit) or more",
                )
        if self.splice_min_bytes < 0:
            raise ConfigError(
                "splice_min_bytes must be 0 (off) or more",
                setting="splice_min_bytes",
                problem="must be 0 (off) or more",
            )
        if not self.shutdown_grace >= 0:
            raise ConfigError(
                "shutdown_grace must be 0 or more seconds",
                setting="shutdown_grace",
                problem="must be 0 or more seconds",
            )
        if not self.acl_store_max_staleness_seconds >= 0:
            raise ConfigError("acl_store_max_staleness_seconds must be 0 (never) or more seconds")
        from aclgate.authz.authorizer import parse_super_users
        from aclgate.protocol.enforce.dryrun import DryRunScope

        try:
            DryRunScope.parse(self.dry_run_principal, self.dry_run_resource)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        for principal in self.super_user:
            try:
                parse_super_users(principal)
            except ValueError as exc:
                raise ConfigError.about("super_user", str(exc)) from None
        if (
            self.acl_file is not None
            and not self.acl_file_missing_ok
            and not self.acl_file.exists()
        ):
            hint = (
                f"(create it with `aclgate acls --acl-file {self.acl_file} --add ...`, or pass "
                "--acl-file-missing-ok to start with an empty policy)"
            )
            raise ConfigError(
                f"acl_file: {self.acl_file} does not exist {hint}",
                setting="acl_file",
                problem=f"no such file {hint}",
            )
        self._validate_audit_topic()
        self._validate_security()
        self._validate_ldap()
        return self

    @property
    def ldap_urls(self) -> tuple[str, ...]:
        """--ldap-url's URLs, in order (none: no groups from LDAP)."""
        text = self.ldap_url or ""
        return tuple(url.strip() for url in text.split(",") if url.strip())

    def _validate_ldap(self) -> None:
        """--ldap-url and its settings (proxy/security/ldapgroups.py); each error names one."""
        if self.ldap_url is None:
            for f in _settings():
                if f.name.startswith("ldap_") and getattr(self, f.name) != f.default:
                    raise ConfigError.about(f.name, "is only used with --ldap-url", " ")
            return
        urls = self.ldap_urls
        if not urls:
            raise ConfigError.about("ldap_url", "no URL given")
        for url in urls:
            problem = _ldap_url_problem(url)
            if problem is not None:
                raise ConfigError.about("ldap_url", f"{url!r}: {problem}")
        if self.listener_security_protocol == "PLAINTEXT":
            raise ConfigError.about(
                "ldap_url",
                "a PLAINTEXT listener has no user to look up (every client is User:ANONYMOUS); "
                "use a SASL or an SSL (mTLS) --listener-security-protocol",
            )
        if (self.ldap_bind_dn is None) != (self.ldap_bind_password_file is None):
            given, missing = (
                ("ldap_bind_dn", "--ldap-bind-password-file")
                if self.ldap_bind_password_file is None
                else ("ldap_bind_password_file", "--ldap-bind-dn")
            )
            raise ConfigError.about(given, f"needs {missing} (or neither: an anonymous bind)", " ")
        if (self.ldap_user_search_base is None) == (self.ldap_user_dn_template is None):
            raise ConfigError.about(
                "ldap_user_search_base",
                "give either --ldap-user-search-base (with --ldap-user-filter) or "
                "--ldap-user-dn-template, not both",
            )
        if self.ldap_user_dn_template is not None and "{user}" not in self.ldap_user_dn_template:
            raise ConfigError.about("ldap_user_dn_template", "has no {user}")
        if self.ldap_user_search_base is not None:
            _check_ldap_filter("ldap_user_filter", self.ldap_user_filter, ("{user}",))
        if self.ldap_group_search_base is None:
            raise ConfigError.about(
                "ldap_url", "needs --ldap-group-search-base (where the groups are)", " "
            )
        _check_ldap_filter("ldap_group_filter", self.ldap_group_filter, ("{dn}", "{user}"))
        if self.ldap_nested_groups and "{dn}" not in self.ldap_group_filter:
            raise ConfigError.about(
                "ldap_nested_groups",
                "needs {dn} in --ldap-group-filter (a group is found among another's members "
                "by its DN)",
            )
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*|\d+(\.\d+)+", self.ldap_group_name_attribute):
            raise ConfigError.about(
                "ldap_group_name_attribute", "is not an attribute name (e.g. cn) or OID"
            )
        for name in ("ldap_cache_ttl", "ldap_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError.about(name, "must be positive")
        if not self.ldap_max_stale >= self.ldap_cache_ttl:
            raise ConfigError.about(
                "ldap_max_stale", f"must be at least --ldap-cache-ttl ({self.ldap_cache_ttl:g})"
            )
        if self.ldap_cache_max_entries < 1:
            raise ConfigError.about("ldap_cache_max_entries", "must be at least 1")
        tls = self.ldap_start_tls or any(url.lower().startswith("ldaps:") for url in urls)
        if self.ldap_start_tls and any(url.lower().startswith("ldaps:") for url in urls):
            raise ConfigError.about("ldap_start_tls", "ldaps:// URLs are TLS already", " ")
        if self.ldap_ssl_cafile is not None and not tls:
            raise ConfigError.about(
                "ldap_ssl_cafile", "is only used with ldaps:// URLs or --ldap-start-tls", " "
            )
        for name in ("ldap_bind_password_file", "ldap_ssl_cafile"):
            path = getattr(self, name)
            if path is not None and not Path(path).exists():
                raise ConfigError(
                    f"{name}: {path} does not exist", setting=name, problem="no such file"
                )

    def _validate_audit_topic(self) -> None:
        if self.audit_topic is None:
            for name in ("audit_bootstrap", "audit_spool"):
                if getattr(self, name) is not None:
                    raise ConfigError(f"{name} is only used with --audit-topic")
            return
        if not self.audit_topic.strip():
            raise ConfigError("audit_topic: empty topic name")
        if self.audit_spool_dir is None:
            raise ConfigError(
                "audit_topic needs --audit-spool DIR (or --audit-file, beside which the spool "
                "then lives): the lines the topic cannot take yet are kept there"
            )
        if self.acl_store == "kafka" and self.audit_topic == self.acl_topic:
            raise ConfigError(f"audit_topic {self.audit_topic} is also the ACL store's --acl-topic")

    @property
    def sasl_mechanism_list(self) -> tuple[str, ...]:
        return tuple(m.strip().upper() for m in self.sasl_mechanisms.split(",") if m.strip())

    def _validate_security(self) -> None:
        protocol = self.listener_security_protocol
        if protocol in ("SSL", "SASL_SSL") and not (self.ssl_certfile and self.ssl_keyfile):
            raise ConfigError.about(
                "listener_security_protocol",
                f"{protocol} needs --ssl-certfile and --ssl-keyfile",
                " ",
            )
        if self.ssl_client_auth != "none" and not self.ssl_cafile:
            raise ConfigError.about(
                "ssl_client_auth",
                f"{self.ssl_client_auth} needs --ssl-cafile (the CAs of client certificates)",
                " ",
            )
        if protocol.startswith("SASL"):
            from aclgate.protocol.identity.sasl import SUPPORTED_MECHANISMS

            mechanisms = self.sasl_mechanism_list
            if not mechanisms:
                raise ConfigError.about(
                    "sasl_mechanisms", "at least one mechanism is needed on a SASL listener"
                )
            for m in mechanisms:
                if m not in SUPPORTED_MECHANISMS:
                    raise ConfigError.about(
                        "sasl_mechanisms", f"{m} is not one of {', '.join(SUPPORTED_MECHANISMS)}"
                    )
            if any(m != "OAUTHBEARER" for m in mechanisms) and not self.users_file:
                raise ConfigError.about(
                    "sasl_mechanisms",
                    "PLAIN/SCRAM need --users-file (create it with `aclgate users add`)",
                    " ",
                )
            if "OAUTHBEARER" in mechanisms:
                self._validate_oauthbearer_keys()
        self._validate_group_sources()
        if self.proxy_protocol and not self.proxy_protocol_trusted:
            raise ConfigError.about(
                "proxy_protocol", "needs at least one --proxy-protocol-trusted CIDR", " "
            )
        if (
            self.upstream_security_protocol.startswith("SASL")
            and self.upstream_sasl_mechanism == "OAUTHBEARER"
        ):
            self._validate_upstream_oauthbearer()
        elif self.upstream_security_protocol.startswith("SASL") and not (
            self.upstream_sasl_username and self.upstream_sasl_password_file
        ):
            raise ConfigError.about(
                "upstream_security_protocol",
                f"{self.upstream_security_protocol} needs --upstream-sasl-username and "
                "--upstream-sasl-password-file",
                " ",
            )
        for name in (
            "users_file",
            "sasl_oauthbearer_jwks_file",
            "upstream_sasl_password_file",
            "ssl_certfile",
            "ssl_keyfile",
            "ssl_cafile",
            "upstream_ssl_cafile",
            "upstream_ssl_certfile",
            "upstream_ssl_keyfile",
            "sasl_oauthbearer_ssl_cafile",
            "upstream_sasl_oauthbearer_client_secret_file",
            "upstream_sasl_oauthbearer_ssl_cafile",
        ):
            path = getattr(self, name)
            if path is not None and not Path(path).exists():
                raise ConfigError(
                    f"{name}: {path} does not exist", setting=name, problem="no such file"
                )

    def _validate_group_sources(self) -> None:
        """The certificate and token group settings (docs/identity.md, "Groups")."""
        if self.ssl_group_mapping_rules is not None or self.ssl_group_from:
            name = "ssl_group_mapping_rules" if self.ssl_group_mapping_rules else "ssl_group_from"
            if self.listener_security_protocol != "SSL":
                # as in Kafka, only an SSL listener takes who the client is from its
                # certificate: silently unused, a DENY on a certificate group would not apply
                raise ConfigError.about(
                    name,
                    "applies to SSL listeners only (on "
                    f"{self.listener_security_protocol} the certificate gives neither the "
                    "principal nor groups)",
                    " ",
                )
            from aclgate.protocol.identity.certgroups import (
                CertificateGroupMapper,
                parse_group_source,
            )

            try:
                self.ssl_group_from = [parse_group_source(s) for s in self.ssl_group_from]
            except ValueError as exc:
                raise ConfigError.about("ssl_group_from", str(exc)) from None
            try:
                CertificateGroupMapper.from_settings(
                    self.ssl_group_mapping_rules, self.ssl_group_from
                )
            except ValueError as exc:
                raise ConfigError.about("ssl_group_mapping_rules", str(exc)) from None
        claim = self.sasl_oauthbearer_groups_claim_name
        if claim is not None and not claim.strip():
            raise ConfigError.about("sasl_oauthbearer_groups_claim_name", "must not be empty")

    def _validate_oauthbearer_keys(self) -> None:
        """OAUTHBEARER on the listener: exactly one source of verification keys."""
        from aclgate.proxy.httpclient import check_https_url

        sources = [
            name
            for name in (
                "sasl_oauthbearer_jwks_file",
                "sasl_oauthbearer_jwks_endpoint_url",
                "sasl_oauthbearer_oidc_discovery_url",
            )
            if getattr(self, name)
        ]
        if len(sources) != 1:
            raise ConfigError(
                "OAUTHBEARER needs one of --sasl-oauthbearer-jwks-file, "
                "--sasl-oauthbearer-jwks-endpoint-url, --sasl-oauthbearer-oidc-discovery-url"
                + (f" (got {', '.join(sources)})" if sources else "")
            )
        for name in ("sasl_oauthbearer_jwks_endpoint_url", "sasl_oauthbearer_oidc_discovery_url"):
            if getattr(self, name):
                try:
                    check_https_url(getattr(self, name), name)
                except ValueError as exc:
                    raise ConfigError(str(exc)) from None
        for name in (
            "sasl_oauthbearer_jwks_endpoint_refresh_ms",
            "sasl_oauthbearer_jwks_endpoint_retry_backoff_ms",
            "sasl_oauthbearer_jwks_endpoint_retry_backoff_max_ms",
        ):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive")

    def _validate_upstream_oauthbearer(self) -> None:
        """The proxy's own OAUTHBEARER login: a token endpoint and client credentials."""
        from aclgate.proxy.httpclient import check_https_url

        if not (
            self.upstream_sasl_oauthbearer_token_endpoint_url
            and self.upstream_sasl_oauthbearer_client_id
            and self.upstream_sasl_oauthbearer_client_secret_file
        ):
            raise ConfigError(
                "upstream_sasl_mechanism OAUTHBEARER needs "
                "--upstream-sasl-oauthbearer-token-endpoint-url, "
                "--upstream-sasl-oauthbearer-client-id and "
                "--upstream-sasl-oauthbearer-client-secret-file"
            )
        try:
            check_https_url(
                self.upstream_sasl_oauthbearer_token_endpoint_url,
                "upstream_sasl_oauthbearer_token_endpoint_url",
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not 0.5 <= self.upstream_sasl_login_refresh_window_factor <= 1.0:
            raise ConfigError(
                "upstream_sasl_login_refresh_window_factor must be between 0.5 and 1.0 "
                "(as Kafka's sasl.login.refresh.window.factor)"
            )

    def _validate_workers(self) -> None:
        """Workers bind their listening ports independently (SO_REUSEPORT): every port must
        be one all of them compute the same, or clients would be sent to a port only one
        worker serves."""
        if self.listen[1] == 0:
            raise ConfigError.about(
                "workers", "more than 1 worker needs a fixed --listen port, not 0"
            )
        if self.broker_ports is None and not self.node_port:
            raise ConfigError.about(
                "workers",
                "more than 1 worker needs --broker-ports or --node-port (ephemeral "
                "per-broker ports would differ between workers)",
            )


def _ldap_url_problem(url: str) -> str | None:
    """What is wrong with an --ldap-url URL (ldap[s]://host[:port]), or None."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return str(exc)
    if parts.scheme.lower() not in ("ldap", "ldaps"):
        return "not an ldap:// or ldaps:// URL"
    if not parts.hostname:
        return "no host"
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        return "only ldap[s]://HOST[:PORT] (the search bases are settings of their own)"
    if port == 0:
        return "port 0"
    return None


def _check_ldap_filter(name: str, text: str, placeholders: tuple[str, ...]) -> None:
    """An LDAP search filter (RFC 4515) with at least one of `placeholders`."""
    from ldap3.core.exceptions import LDAPException
    from ldap3.operation.search import parse_filter

    if not any(p in text for p in placeholders):
        raise ConfigError.about(name, f"has none of {', '.join(placeholders)}")
    sample = text
    for placeholder in placeholders:
        sample = sample.replace(placeholder, "x")
    try:
        parse_filter(sample, None, True, True, None, False)
    except (LDAPException, ValueError, TypeError) as exc:
        raise ConfigError.about(name, f"{text!r} is not an LDAP filter ({exc})") from None


#: The concern groups of the settings table, in the order `serve --help`, docs/configuration.md
#: and the example file show them: (group, title, what it is about, its settings in order).
#: Every ProxyConfig setting is in exactly one group (`settings()` refuses otherwise).
GROUPS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    (
        "listeners",
        "Listeners",
        "where clients connect, the addresses they are given, and the listener's TLS",
        (
            "listen", "advertised_host", "node_port", "broker_ports",
            "listener_security_protocol", "ssl_certfile", "ssl_keyfile", "ssl_cafile",
            "ssl_client_auth", "proxy_protocol", "proxy_protocol_trusted",
        ),
    ),
    (
        "identity",
        "Identity",
        "how a client's principal is established: SASL mechanisms, the users file, OAUTHBEARER "
        "token checks, mTLS principal mapping, re-authentication",
        (
            "sasl_mechanisms", "users_file", "ssl_principal_mapping_rules",
            "ssl_group_mapping_rules", "ssl_group_from", "sasl_oauthbearer_jwks_file", "sasl_oauthbearer_jwks_endpoint_url",
            "sasl_oauthbearer_oidc_discovery_url", "sasl_oauthbearer_jwks_endpoint_refresh_ms",
            "sasl_oauthbearer_jwks_endpoint_retry_backoff_ms",
            "sasl_oauthbearer_jwks_endpoint_retry_backoff_max_ms", "sasl_oauthbearer_ssl_cafile",
            "sasl_oauthbearer_expected_audience", "sasl_oauthbearer_expected_issuer",
            "sasl_oauthbearer_sub_claim_name", "sasl_oauthbearer_groups_claim_name",
            "sasl_oauthbearer_clock_skew_seconds",
            "connections_max_reauth_ms", "connection_failed_authentication_delay_ms",
            "ldap_url", "ldap_bind_dn", "ldap_bind_password_file", "ldap_user_search_base",
            "ldap_user_filter", "ldap_user_dn_template", "ldap_group_search_base",
            "ldap_group_filter", "ldap_group_name_attribute", "ldap_nested_groups",
            "ldap_cache_ttl", "ldap_max_stale", "ldap_cache_max_entries", "ldap_timeout",
            "ldap_start_tls", "ldap_ssl_cafile",
        ),
    ),
    (
        "upstream",
        "Upstream",
        "the Kafka cluster behind the proxy and how the proxy itself logs in to it",
        (
            "upstream", "upstream_security_protocol", "upstream_ssl_cafile",
            "upstream_ssl_certfile", "upstream_ssl_keyfile", "upstream_ssl_check_hostname",
            "upstream_sasl_mechanism", "upstream_sasl_username", "upstream_sasl_password_file",
            "upstream_sasl_oauthbearer_token_endpoint_url", "upstream_sasl_oauthbearer_client_id",
            "upstream_sasl_oauthbearer_client_secret_file", "upstream_sasl_oauthbearer_scope",
            "upstream_sasl_oauthbearer_ssl_cafile", "upstream_sasl_login_refresh_window_factor",
            "connect_timeout", "upstream_check_interval", "api_version_cap", "splice_min_bytes",
        ),
    ),
    (
        "acls",
        "ACLs",
        "the policy: where the ACLs live, who bypasses them, and dry-run",
        (
            "acl_store", "acl_file", "acl_file_missing_ok", "acl_topic", "acl_bootstrap",
            "acl_topic_replication_factor", "acl_topic_skip_offset", "acl_transactional_id",
            "acl_store_max_staleness_seconds", "early_start", "super_user",
            "allow_everyone_if_no_acl_found", "acl_host_cidr", "mode", "dry_run_principal",
            "dry_run_resource", "dry_run_file", "delete_acls_max_share",
        ),
    ),
    (
        "audit",
        "Audit",
        "the record of every decision: a rotated JSON-lines file and/or a Kafka topic",
        (
            "audit_file", "audit_format", "audit_max_bytes", "audit_keep", "audit_window",
            "proxy_name", "audit_topic", "audit_bootstrap", "audit_spool",
            "audit_spool_max_bytes", "audit_delivery_timeout",
        ),
    ),
    (
        "limits",
        "Limits",
        "what one client may hold or send: sizes, connections, rates and timeouts",
        (
            "max_frame_bytes", "max_request_bytes", "max_in_flight", "max_connections",
            "max_connections_per_ip", "max_connections_per_principal",
            "max_connection_creation_rate", "connections_max_idle_ms",
            "authentication_timeout_ms", "partial_request_timeout_ms",
        ),
    ),
    (
        "operations",
        "Operations",
        "metrics and health endpoints, logging, worker processes, shutdown",
        ("metrics_listen", "log_level", "workers", "shutdown_grace"),
    ),
)  # fmt: skip

#: what is applied while the proxy runs; every other setting is read once at start, so
#: changing it (in the TOML file or on the command line) needs a restart. There is no SIGHUP
#: reload: the files below are polled (`file_signature`: mtime, size, inode) and followed.
RELOADED: dict[str, str] = {
    "acl_file": "contents reloaded when the file changes (polled each second); a broken file "
    "keeps the previous policy",
    "dry_run_file": "contents reloaded when the file changes (polled each second); a broken "
    "file keeps the previous scope",
    "users_file": "contents reloaded when the file changes (checked at each new SASL "
    "exchange); a broken file keeps the previous users",
    "ssl_certfile": "contents reloaded when the file changes: new connections get the new "
    "certificate, a broken file keeps the previous one",
    "ssl_keyfile": "contents reloaded together with --ssl-certfile",
    "ssl_cafile": "contents reloaded together with --ssl-certfile",
    "upstream_ssl_cafile": "contents reloaded when the file changes: new upstream connections "
    "use them, a broken file keeps the previous ones",
    "upstream_ssl_certfile": "contents reloaded together with --upstream-ssl-cafile",
    "upstream_ssl_keyfile": "contents reloaded together with --upstream-ssl-cafile",
    "upstream_sasl_password_file": "re-read when the file changes: the next login uses the "
    "new password",
    "ldap_bind_password_file": "re-read for each new directory connection: the next bind "
    "uses the new password",
    "upstream_sasl_oauthbearer_client_secret_file": "re-read when the file changes: the next "
    "token request uses the new secret",
    "sasl_oauthbearer_jwks_endpoint_url": "restart; the keys it serves are fetched again every "
    "--sasl-oauthbearer-jwks-endpoint-refresh-ms",
    "sasl_oauthbearer_oidc_discovery_url": "restart; the keys it points to are fetched again "
    "every --sasl-oauthbearer-jwks-endpoint-refresh-ms",
}
RESTART = "restart"


@dataclass(frozen=True)
class Setting:
    """One row of the settings table: everything the three views (serve --help,
    docs/configuration.md, examples/aclgate.toml) say about a setting."""

    name: str
    flag: str
    toml_key: str
    #: no setting is read from the environment (secrets come from files, see *_file settings)
    env: str | None
    default: str
    reload: str
    group: str
    help: str
    metavar: str | None
    choices: tuple[str, ...] | None
    multiple: bool
    boolean: bool


def _settings() -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(ProxyConfig) if "help" in f.metadata]


def _flag(f: dataclasses.Field) -> str:
    return f.metadata["flag"] or "--" + f.name.replace("_", "-")


def toml_value(value: Any) -> str:
    """`value` as TOML writes it (strings quoted, lists in brackets), for docs and errors."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def _default(f: dataclasses.Field) -> str:
    """The default as the TOML file would spell it, or `(none)`."""
    value: Any = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    if value is None or value == [] or value == {}:
        return "(none)"
    if f.name == "listen":  # the one HOST:PORT with a default
        return toml_value(f"{value[0]}:{value[1]}")
    return toml_value(value)


def settings() -> list[Setting]:
    """The settings table in its documented order (GROUPS), built from ProxyConfig's fields."""
    fields = {f.name: f for f in _settings()}
    placed = [name for _, _, _, names in GROUPS for name in names]
    if sorted(placed) != sorted(fields) or len(set(placed)) != len(placed):
        missing = sorted(set(fields) - set(placed))
        extra = sorted(set(placed) - set(fields))
        raise RuntimeError(
            f"config.GROUPS out of step with ProxyConfig: not placed {missing}, unknown {extra}"
        )
    table = []
    for group, _, _, names in GROUPS:
        for name in names:
            f = fields[name]
            meta = f.metadata
            table.append(
                Setting(
                    name=name,
                    flag=_flag(f),
                    toml_key=name,
                    env=None,
                    default=_default(f),
                    reload=RELOADED.get(name, RESTART),
                    group=group,
                    help=meta["help"],
                    metavar=meta["metavar"],
                    choices=tuple(meta["choices"]) if meta["choices"] else None,
                    multiple=meta["multiple"],
                    boolean=meta["boolean"],
                )
            )
    return table


#: where a setting's value came from: ("flag", "--listen") or ("toml", "aclgate.toml", "listen")
Origin = tuple[str, ...]


def name_setting(origin: Origin | None, name: str, value: Any) -> str:
    """A setting and its value the way the user wrote them: `--ssl-certfile pki/srv.crt`,
    `aclgate.toml: ssl_certfile = "pki/srv.crt"`, or for a default `listen 127.0.0.1:9092`."""
    if origin is None:
        return f"{name} {value} (the default)"
    if origin[0] == "flag":
        return f"{origin[1]} {value}" if value is not None else origin[1]
    return f"{origin[1]}: {origin[2]} = {toml_value(value)}"


def _convert(f: dataclasses.Field, value: Any, origin: Origin) -> Any:
    """A TOML or flag value for field `f`, converted to the field's type; a bad one is a
    ConfigError that names the setting as the user wrote it (the flag, or the file and key)."""
    parse = f.metadata["parse"]
    multiple = f.metadata["multiple"]
    item: Any = value
    try:
        if multiple:
            if isinstance(value, Mapping):  # TOML tables: node_port = { 1 = 19092 }
                items = [f"{k}={v}" for k, v in value.items()]
            elif isinstance(value, list | tuple):
                items = list(value)
            else:
                items = [value]
            if f.name == "upstream":  # Kafka's bootstrap.servers style: k1:9092,k2:9092
                items = [part for item in items for part in str(item).split(",") if part.strip()]
            parsed: list[Any] = []
            for item in items:
                parsed.append(parse(str(item)) if parse else item)
            as_dict = f.default_factory is not dataclasses.MISSING and isinstance(
                f.default_factory(), dict
            )
            return dict(parsed) if as_dict else parsed
        if value is None:
            return None
        if f.metadata["boolean"]:
            if not isinstance(value, bool):
                raise ConfigError(f"must be true or false, not {value!r}")
            return value
        if parse is not None and isinstance(value, str):
            return parse(value)
        if parse is not None and f.type in ("int", "float"):
            return parse(value)
        choices = f.metadata["choices"]
        if choices:
            norm = str(value).lower() if f.metadata["lower"] else str(value).upper()
            if norm not in choices:
                raise ConfigError(f"must be one of {', '.join(choices)}")
            return norm
        return value
    except (ConfigError, ValueError) as exc:
        problem = exc.problem if isinstance(exc, ConfigError) else str(exc)
        where = name_setting(origin, f.name, item if origin[0] == "toml" else None)
        raise ConfigError(f"{where}: {problem}", setting=f.name, problem=problem) from None


def load_toml(path: Path) -> dict[str, Any]:
    """The settings of a TOML file, converted; errors name the file and the key as written."""
    return _load_toml(path)[0]


def _load_toml(path: Path) -> tuple[dict[str, Any], dict[str, Origin], dict[str, Any]]:
    """(converted values, where each came from, the values as written)."""
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    known = {f.name: f for f in _settings()}
    out: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    written: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in known:
            raise ConfigError(f"{path}: unknown setting {key!r} (see docs/configuration.md)")
        origins[name] = ("toml", str(path), key)
        written[name] = value
        out[name] = _convert(known[name], value, origins[name])
    return out, origins, written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting, in argument groups by concern (the table's order); defaults stay
    unset so a TOML value is not overridden."""
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="TOML file with the settings below, keyed as the flags without `--` and with "
        "underscores (docs/configuration.md, examples/aclgate.toml); flags win",
    )
    fields = {f.name: f for f in _settings()}
    groups = {
        group: parser.add_argument_group(title, description)
        for group, title, description, _ in GROUPS
    }
    for setting in settings():
        f = fields[setting.name]
        meta = f.metadata
        kwargs: dict[str, Any] = {"help": meta["help"], "dest": f.name, "default": None}
        if meta["metavar"]:
            kwargs["metavar"] = meta["metavar"]
        if meta["choices"]:
            kwargs["choices"] = meta["choices"]
            kwargs["type"] = str.lower if meta["lower"] else str.upper
        if meta["multiple"]:
            kwargs["action"] = "append"
        if meta["boolean"]:
            kwargs.pop("metavar", None)
            kwargs["action"] = argparse.BooleanOptionalAction
        groups[setting.group].add_argument(setting.flag, **kwargs)


def from_args(args: argparse.Namespace) -> ProxyConfig:
    """The configuration from a TOML file (--config) and flags, flags winning. A setting's
    error names it as the user wrote it: `--flag VALUE: problem`, `FILE: key = value: problem`."""
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    written: dict[str, Any] = {}
    if getattr(args, "config", None):
        values, origins, written = _load_toml(args.config)
    for f in _settings():
        given = getattr(args, f.name, None)
        if given is not None:
            origins[f.name] = ("flag", _flag(f))
            written[f.name] = None if isinstance(given, list) else given  # repeated: the flag
            values[f.name] = _convert(f, given, origins[f.name])
    config = ProxyConfig(**values)
    config.origins = origins
    try:
        return config.validate()
    except ConfigError as exc:
        if exc.setting not in origins:
            raise
        where = name_setting(origins[exc.setting], exc.setting, written[exc.setting])
        raise ConfigError(
            f"{where}: {exc.problem}", setting=exc.setting, problem=exc.problem
        ) from None


def bind_error(config: ProxyConfig, exc: OSError) -> str:
    """A port that cannot be bound, named by the setting that asked for it, the way the user
    wrote it (`--listen 127.0.0.1:29404: address already in use`); other errors as they are."""
    listener = re.search(r"\('?([^',]*)'?, (\d+)", str(exc))  # asyncio/uvloop: (host, port)
    fixed = re.search(r"cannot bind port (\d+) for broker", str(exc))  # a --node-port's
    if listener and exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
        host, port = listener.group(1), int(listener.group(2))
        problem = os.strerror(exc.errno).lower()
    elif fixed:
        host, port = config.listen[0], int(fixed.group(1))
        problem = "cannot bind it (in use, or not allowed)"
    else:
        return str(exc)
    address = f"{host}:{port}"
    candidates: list[tuple[str, str]] = []
    if config.listen[1] == port:
        candidates.append(("listen", address))
    if config.metrics_listen and config.metrics_listen[1] == port:
        candidates.append(("metrics_listen", address))
    candidates += [
        ("node_port", f"{node}={port}") for node, p in config.node_port.items() if p == port
    ]
    if config.broker_ports and config.broker_ports[0] <= port <= config.broker_ports[1]:
        first, last = config.broker_ports
        candidates.append(("broker_ports", f"{first}-{last}"))
    if not candidates:
        return f"{address}: {problem}"
    name, shown = candidates[0]
    if name == "broker_ports":  # the range names many ports: say which one
        problem = f"port {port}: {problem}"
    return f"{name_setting(config.origins.get(name), name, shown)}: {problem}"
