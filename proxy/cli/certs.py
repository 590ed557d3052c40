"""Create a development CA and server/client certificates (PEM) for TLS and mTLS.

  aclgate certs init   --out DIR                         writes DIR/ca.crt, DIR/ca.key
  aclgate certs server --out DIR --dns NAME --ip ADDR    writes DIR/server.crt, DIR/server.key
  aclgate certs client --out DIR --name NAME --subject "CN=alice,OU=eng,O=example"
                       [--san URI:spiffe://example.org/sa/alice --san EMAIL:alice@example.org]
                                                         writes DIR/NAME.crt, DIR/NAME.key

Certificates are signed by the CA in DIR. Keys are written with mode 0600, certificates 0644;
existing files are kept unless --force is given. For development and tests, not production.
"""

from __future__ import annotations

import argparse
import sys

from aclgate.certs.pki import (
    CA_DAYS,
    LEAF_DAYS,
    PkiError,
    create_ca,
    issue_client,
    issue_server,
    parse_san,
)


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    def common(p: argparse.ArgumentParser, days: int) -> None:
        p.add_argument("--out", required=True, metavar="DIR", help="directory holding the CA")
        p.add_argument("--days", type=int, default=days, help=f"validity in days (default {days})")
        p.add_argument(
            "--key-type", choices=("ec", "rsa"), default="ec", help="EC P-256 (default) or RSA 2048"
        )
        p.add_argument("--force", action="store_true", help="overwrite existing files")

    p = sub.add_parser("init", help="create a CA (ca.crt, ca.key)")
    common(p, CA_DAYS)
    p.add_argument("--cn", default="aclgate development CA", help="the CA's common name")

    p = sub.add_parser("server", help="issue server.crt/server.key signed by the CA")
    common(p, LEAF_DAYS)
    p.add_argument(
        "--dns", nargs="+", action="extend", default=[], metavar="NAME", help="DNS names (SAN)"
    )
    p.add_argument(
        "--ip", nargs="+", action="extend", default=[], metavar="ADDR", help="IP addresses (SAN)"
    )
    p.add_argument("--name", default="server", help="file name stem (default: server)")

    p = sub.add_parser("client", help="issue NAME.crt/NAME.key for mTLS signed by the CA")
    common(p, LEAF_DAYS)
    p.add_argument("--name", required=True, help="file name stem: writes NAME.crt and NAME.key")
    p.add_argument(
        "--subject", required=True, help='RFC 4514 subject, e.g. "CN=alice,OU=eng,O=example"'
    )
    p.add_argument(
        "--san",
        nargs="+",
        action="extend",
        default=[],
        metavar="TYPE:VALUE",
        help="subjectAltName entries (repeatable): DNS:NAME, IP:ADDR, URI:URI, EMAIL:ADDRESS, "
        "e.g. URI:spiffe://example.org/ns/payments/sa/app (what `serve --ssl-group-from "
        "SAN:URI|SAN:DNS|SAN:EMAIL` reads groups from)",
    )
    validity = p.add_mutually_exclusive_group()
    validity.add_argument("--expired", action="store_true", help="make it already expired (tests)")
    validity.add_argument(
        "--not-yet-valid", action="store_true", help="make it valid from tomorrow (tests)"
    )


def run(args: argparse.Namespace) -> int:
    if args.days < 1:
        print("aclgate certs: --days must be at least 1", file=sys.stderr)
        return 2
    try:
        if args.action == "init":
            paths = create_ca(
                args.out,
                common_name=args.cn,
                days=args.days,
                key_type=args.key_type,
                force=args.force,
            )
        elif args.action == "server":
            paths = issue_server(
                args.out,
                dns=args.dns,
                ips=args.ip,
                name=args.name,
                days=args.days,
                key_type=args.key_type,
                force=args.force,
            )
        else:
            validity = (
                "expired" if args.expired else "not-yet-valid" if args.not_yet_valid else "valid"
            )
            paths = issue_client(
                args.out,
                args.name,
                args.subject,
                days=args.days,
                validity=validity,
                key_type=args.key_type,
                force=args.force,
                san=[parse_san(s) for s in args.san],
            )
    except PkiError as e:
        print(f"aclgate certs {args.action}: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(
            f"aclgate certs {args.action}: {e.strerror or e}: {e.filename or args.out}",
            file=sys.stderr,
        )
        return 1
    for path in paths:
        print(path)
    return 0
