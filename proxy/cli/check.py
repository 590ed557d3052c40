"""Decide a file of authorization queries against an ACL file, exactly as the proxy would.

Each input line is a JSON object:
  {"principal": "User:bob", "host": "10.0.0.1", "operation": "READ",
   "resource_type": "TOPIC", "resource_name": "orders"}
optionally with the session's group principals: "groups": ["Group:payments"].
and gives one output line: the same object plus "decision" ("ALLOWED" or "DENIED"), "rule"
(ACL, SUPER_USER, NO_ACL_DEFAULT or DEFAULT_DENY) and "acl" (the deciding ACL, or null).

Without --expect, decisions are data: the exit status is 0 whatever they are. With --expect,
each query also carries "expect" ("ALLOWED" or "DENIED") and optionally "expect_rule"; the
output is a diff-style report of the queries decided otherwise, and the exit status is 1 if
there is any (0 if none), so a CI step can gate on a policy. --junit-xml writes the same cases
as JUnit XML. The exit status is 2 when the policy or a query line is unusable (then nothing
is printed).

examples:
  aclgate check --acl-file acls.json --queries queries.jsonl
  aclgate check --acl-file acls.json --queries policy-tests.jsonl --expect --junit-xml report.xml
  printf '%s\\n' '{"principal":"User:bob","host":"10.0.0.1","operation":"READ","resource_type":"TOPIC","resource_name":"orders"}' \\
    | aclgate check --acl-file acls.json --queries -
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, TextIO

from aclgate.authz.authorizer import Authorizer, Decision
from aclgate.authz.model import (
    FILTER_ONLY_TYPES,
    AclOperation,
    ResourceType,
    parse_enum,
    parse_principal,
)
from aclgate.proxy.cli import aclsource
from aclgate.proxy.cli.checkexpect import Case, junit_xml, parse_expectation, write_report

QUERY_FIELDS = ("principal", "host", "operation", "resource_type", "resource_name")


class QueryError(ValueError):
    """A query line that cannot be decided."""


def configure(parser: argparse.ArgumentParser) -> None:
    aclsource.configure(parser)
    parser.add_argument(
        "--queries",
        required=True,
        metavar="QUERIES.jsonl",
        help="one JSON query per line; - for stdin",
    )
    parser.add_argument(
        "--super-user",
        action="append",
        default=[],
        metavar="User:x",
        help="a super user (repeatable), allowed everything as by Kafka's super.users",
    )
    parser.add_argument(
        "--allow-everyone-if-no-acl-found",
        action="store_true",
        help="allow when no ACL at all covers the resource (Kafka's allow.everyone.if.no.acl.found)",
    )
    parser.add_argument(
        "--expect",
        action="store_true",
        help='every query carries "expect" (and optionally "expect_rule"); exit 1 on a difference',
    )
    parser.add_argument(
        "--junit-xml",
        metavar="FILE",
        help="with --expect: also write the cases as JUnit XML to FILE",
    )


def parse_query(line: str) -> tuple[dict[str, Any], tuple]:
    """The query object and the authorize() arguments it stands for."""
    try:
        query = json.loads(line)
    except json.JSONDecodeError as exc:
        raise QueryError(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(query, dict):
        raise QueryError("expected a JSON object")
    for field in QUERY_FIELDS:
        if not isinstance(query.get(field), str):
            problem = "missing" if field not in query else "must be a string"
            raise QueryError(f"field {field!r} {problem}")
    try:
        parse_principal(query["principal"])
        operation = parse_enum(AclOperation, query["operation"])
        resource_type = parse_enum(ResourceType, query["resource_type"])
    except ValueError as exc:
        raise QueryError(str(exc)) from None
    if operation <= AclOperation.ANY:
        raise QueryError(f"operation {operation.name} is a filter value, not an operation")
    if resource_type in FILTER_ONLY_TYPES:
        raise QueryError(f"resource_type {resource_type.name} is a filter value, not a type")
    return query, (
        query["principal"],
        query["host"],
        operation,
        resource_type,
        query["resource_name"],
        _groups(query),
    )


def _groups(query: dict[str, Any]) -> frozenset[str]:
    """The optional `groups` of a query: the session's group principals, e.g.
    ["Group:payments"] (docs/authz.md, "Group principals")."""
    groups = query.get("groups", [])
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise QueryError("field 'groups' must be a list of strings like \"Group:payments\"")
    for group in groups:
        try:
            parse_principal(group)
        except ValueError as exc:
            raise QueryError(f"groups: {exc}") from None
    return frozenset(groups)


def render(query: dict[str, Any], decision: Decision) -> str:
    out = {
        **query,
        "decision": decision.verdict,
        "rule": decision.rule,
        "acl": decision.acl.to_dict() if decision.acl is not None else None,
    }
    return json.dumps(out, ensure_ascii=False)


Parsed = tuple[int, dict[str, Any], tuple]  # line number, query, authorize() arguments


def _read_queries(source: TextIO, name: str, expect: bool) -> list[Parsed]:
    parsed = []
    for number, line in enumerate(source, start=1):
        if not line.strip():
            continue
        try:
            query, call = parse_query(line)
            if expect:
                parse_expectation(query)
        except (QueryError, ValueError) as exc:
            raise QueryError(f"{name}:{number}: {exc}") from None
        parsed.append((number, query, call))
    return parsed


def run(args: argparse.Namespace) -> int:
    try:
        if args.junit_xml and not args.expect:
            raise QueryError("--junit-xml needs --expect")
        authorizer = Authorizer(
            super_users=args.super_user,
            allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found,
            cidr_hosts=args.acl_host_cidr,
        )
        authorizer.load(aclsource.load_acls(args))
        if args.queries == "-":
            queries = _read_queries(sys.stdin, "<stdin>", args.expect)
        else:
            with open(args.queries, encoding="utf-8") as f:
                queries = _read_queries(f, args.queries, args.expect)
    except (aclsource.AclSourceError, QueryError, ValueError, OSError) as exc:
        message = f"{exc.filename}: {exc.strerror}" if isinstance(exc, OSError) else str(exc)
        print(f"aclgate check: {message}", file=sys.stderr)
        return 2
    if args.expect:
        return _check(args, queries, authorizer)
    out = sys.stdout
    for _, query, call in queries:
        out.write(render(query, authorizer.authorize(*call)) + "\n")
    out.flush()
    return 0


def _check(args: argparse.Namespace, queries: list[Parsed], authorizer: Authorizer) -> int:
    """Decide every query, report the differences; 1 if there is any."""
    source = "<stdin>" if args.queries == "-" else args.queries
    cases = [
        Case(source, number, query, parse_expectation(query), authorizer.authorize(*call))
        for number, query, call in queries
    ]
    write_report(cases, sys.stdout)
    sys.stdout.flush()
    if args.junit_xml:
        suite = os.path.basename(source)
        try:
            with open(args.junit_xml, "wb") as f:
                f.write(junit_xml(cases, suite))
        except OSError as exc:
            print(f"aclgate check: {exc.filename}: {exc.strerror}", file=sys.stderr)
            return 2
    return 0 if all(c.passed for c in cases) else 1
