"""Where an offline command (`aclgate check`) reads the policy from: one function per ACL store.

The proxy keeps its policy in a store backend (proxy/aclbackend.py: `file` or `kafka`); a policy
test must be able to run against the same store the fleet uses, so the CLI picks the store with
`--acl-store` and `load_acls` returns the ACL set it holds right now. Adding a store is one entry
in LOADERS and its options in `configure`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from aclgate.authz.aclfile import AclFileError
from aclgate.authz.model import AclBinding
from aclgate.proxy.aclstore import AclFileStore


class AclSourceError(ValueError):
    """The ACL store named on the command line cannot be read; the message says why."""


def configure(parser: argparse.ArgumentParser) -> None:
    """The options that name the store and where it is."""
    parser.add_argument(
        "--acl-store",
        choices=sorted(LOADERS),
        default="file",
        help="where the policy lives (default: file)",
    )
    parser.add_argument("--acl-file", metavar="ACLS.json", help="the policy (--acl-store file)")
    parser.add_argument(
        "--acl-bootstrap",
        metavar="HOST:PORT,...",
        help="--acl-store kafka: the cluster holding the ACL topic (plaintext)",
    )
    parser.add_argument(
        "--acl-topic",
        default="__aclgate_acls",
        metavar="NAME",
        help="--acl-store kafka: the ACL topic (default: __aclgate_acls)",
    )
    parser.add_argument(
        "--acl-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="--acl-store kafka: how long reading the topic to its end may take (default 60)",
    )


def _from_file(args: argparse.Namespace) -> list[AclBinding]:
    if not args.acl_file:
        raise AclSourceError("--acl-store file needs --acl-file")
    try:
        return AclFileStore(args.acl_file).load()
    except AclFileError as exc:
        raise AclSourceError(str(exc)) from None


def _from_kafka(args: argparse.Namespace) -> list[AclBinding]:
    """The ACL topic replayed to its end, as a starting proxy would (proxy/kafkaaclstore.py)."""
    if not args.acl_bootstrap:
        raise AclSourceError("--acl-store kafka needs --acl-bootstrap")
    from aclgate.proxy.aclbackend import AclStoreError
    from aclgate.proxy.kafkaaclstore import KafkaStoreSettings, read_acl_topic

    settings = KafkaStoreSettings(bootstrap=args.acl_bootstrap, topic=args.acl_topic)
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
