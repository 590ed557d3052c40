"""Where an offline command (`aclgate check`) reads the policy from: one function per ACL store.

The proxy keeps its policy in a store backend (proxy/aclstore/backend.py: `file` or `kafka`); a policy
test must be able to run against the same store the fleet uses, so the CLI picks the store with
`--acl-store` and `load_acls` returns the ACL set it holds right now. Adding a store is one entry
in LOADERS and its options in `configure`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from aclgate.authz.aclfile import AclFileError
from aclgate.authz.model import AclBinding
from aclgate.proxy.aclstore.filewatch import AclFileStore

if TYPE_CHECKING:
    from aclgate.proxy.aclstore.kafka.store import KafkaStoreSettings


class AclSourceError(ValueError):
    """The ACL store named on the command line cannot be read; the message says why."""


def configure(parser: argparse.ArgumentParser, file_option: bool = True) -> None:
    """The options that name the store and where it is (`aclgate acls` has its own
    --acl-file, so `file_option=False` leaves it out)."""
    parser.add_argument(
        "--acl-store",
        choices=sorted(LOADERS),
        default="file",
        help="where the policy lives (default: file)",
    )
    if file_option:
        parser.add_argument("--acl-file", metavar="ACLS.json", help="the policy (--acl-store file)")
    parser.add_argument(
        "--acl-bootstrap",
        metavar="HOST:PORT,...",
        help="--acl-store kafka: the cluster holding the ACL topic",
    )
    parser.add_argument(
        "--acl-topic",
        default="__aclgate_acls",
        metavar="NAME",
        help="--acl-store kafka: the ACL topic (default: __aclgate_acls)",
    )
    parser.add_argument(
        "--acl-command-config",
        metavar="FILE",
        help="--acl-store kafka: Java client properties for --acl-bootstrap (security.protocol, "
        "sasl.mechanism PLAIN/SCRAM-SHA-256/512, sasl.jaas.config, ssl.truststore.location PEM); "
        "default plaintext",
    )
    parser.add_argument(
        "--acl-host-cidr",
        action="store_true",
        help="KIP-1276 (as `aclgate serve --acl-host-cidr`): an ACL host with / is a network, "
        "e.g. 10.0.0.0/8 or 2001:db8::/32, and must be a valid one; `check` matches client "
        "hosts in it. Default: a literal string, as in Kafka 4.3.1",
    )
    parser.add_argument(
        "--acl-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="--acl-store kafka: how long reading the topic to its end may take (default 60)",
    )


def kafka_settings(args: argparse.Namespace) -> KafkaStoreSettings:
    """Where the `kafka` store's topic is and how to log in to its cluster, from the options."""
    if not args.acl_bootstrap:
        raise AclSourceError("--acl-store kafka needs --acl-bootstrap")
    from aclgate.proxy.aclstore.kafka.store import KafkaStoreSettings
    from aclgate.proxy.cli.aclstorecli import AclStoreCliError, ClientSecurity, read_properties

    try:
        properties = read_properties(args.acl_command_config) if args.acl_command_config else {}
        client = ClientSecurity.from_properties(properties).librdkafka()
    except (AclStoreCliError, OSError) as exc:
        raise AclSourceError(f"--acl-command-config: {exc}") from None
    # librdkafka writes each failed connection attempt to stderr itself (dozens of lines
    # while a cluster is unreachable); the command's own error line says what failed
    client["log_level"] = "2"
    return KafkaStoreSettings(
        bootstrap=args.acl_bootstrap,
        topic=args.acl_topic,
        client=client,
        start_timeout=args.acl_timeout,
        connect_timeout=min(30.0, args.acl_timeout),
        cidr_hosts=args.acl_host_cidr,
    )


def _from_file(args: argparse.Namespace) -> list[AclBinding]:
    if not args.acl_file:
        raise AclSourceError("--acl-store file needs --acl-file")
    try:
        return AclFileStore(args.acl_file, args.acl_host_cidr).load()
    except AclFileError as exc:
        raise AclSourceError(str(exc)) from None


def _from_kafka(args: argparse.Namespace) -> list[AclBinding]:
    """The ACL topic replayed to its end, as a starting proxy would (proxy/aclstore/kafka/store.py)."""
    from aclgate.proxy.aclstore.backend import AclStoreError
    from aclgate.proxy.aclstore.kafka.store import read_acl_topic

    settings = kafka_settings(args)
    try:
        return read_acl_topic(settings, timeout=args.acl_timeout)
    except AclStoreError as exc:
        raise AclSourceError(str(exc)) from None


LOADERS: dict[str, Callable[[argparse.Namespace], list[AclBinding]]] = {
    "file": _from_file,
    "kafka": _from_kafka,
}


def load_acls(args: argparse.Namespace) -> list[AclBinding]:
    """The ACL set of the store the options name; AclSourceError when it cannot be read."""
    return LOADERS[args.acl_store](args)
