"""`aclgate check --expect`: queries that carry their expected decision, checked like tests.

A query line adds `"expect": "ALLOWED" | "DENIED"` and optionally `"expect_rule"` (ACL,
SUPER_USER, NO_ACL_DEFAULT, DEFAULT_DENY). Every query is a test case; a difference is reported
in unified-diff style (`-` expected, `+` actual) and makes the run fail, so a CI step gates on
"alice may still write orders, bob may not". `--junit-xml` writes the same cases for CI UIs.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from aclgate.authz.decision import (
    RULE_ACL,
    RULE_DEFAULT_DENY,
    RULE_NO_ACL_DEFAULT,
    RULE_SUPER_USER,
    Decision,
)
from aclgate.authz.text import standard_acl

VERDICTS = ("ALLOWED", "DENIED")
RULES = (RULE_ACL, RULE_SUPER_USER, RULE_NO_ACL_DEFAULT, RULE_DEFAULT_DENY)


@dataclass(frozen=True, slots=True)
class Expectation:
    verdict: str
    rule: str | None


def parse_expectation(query: dict[str, Any]) -> Expectation:
    """The query's expectation; ValueError naming the field when it is missing or wrong."""
    verdict = query.get("expect")
    if verdict not in VERDICTS:
        problem = "missing" if "expect" not in query else f"must be one of {', '.join(VERDICTS)}"
        raise ValueError(f"field 'expect' {problem}")
    rule = query.get("expect_rule")
    if rule is not None and rule not in RULES:
        raise ValueError(f"field 'expect_rule' must be one of {', '.join(RULES)}")
    return Expectation(verdict, rule)


@dataclass(frozen=True, slots=True)
class Case:
    """One query decided: where it came from, what was expected, what happened."""

    source: str  # file name
    line: int
    query: dict[str, Any]
    expected: Expectation
    decision: Decision

    @property
    def passed(self) -> bool:
        exp = self.expected
        return exp.verdict == self.decision.verdict and exp.rule in (None, self.decision.rule)

    @property
    def name(self) -> str:
        """The query's own `id` or `name` if it has one, else what it asks."""
        q = self.query
        label = q.get("id", q.get("name"))
        asks = (
            f"{q['principal']} {q['operation']} {q['resource_type']}:{q['resource_name']}"
            f" from {q['host']}"
        )
        return f"{label}: {asks}" if label is not None else asks

    def expected_line(self) -> str:
        rule = self.expected.rule
        return self.expected.verdict + (f" by {rule}" if rule else "")

    def actual_line(self) -> str:
        d = self.decision
        acl = f" {standard_acl(d.acl)}" if d.acl is not None else ""
        return f"{d.verdict} by {d.rule}{acl}"

    def diff(self) -> str:
        return (
            f"@@ {self.source}:{self.line} @@ {self.name}\n"
            f"-{self.expected_line()}\n+{self.actual_line()}\n"
        )


def write_report(cases: Sequence[Case], out: TextIO) -> None:
    """The differences as a unified diff, then one summary line."""
    failed = [c for c in cases if not c.passed]
    if failed:
        out.write("--- expected\n+++ actual\n")
        for case in failed:
            out.write(case.diff())
    verdict = "FAILED" if failed else "OK"
    out.write(f"{verdict}: {len(cases)} queries, {len(cases) - len(failed)} as expected, "
              f"{len(failed)} different\n")  # fmt: skip


def junit_xml(cases: Sequence[Case], suite: str) -> bytes:
    """A JUnit XML report: one testcase per query, a <failure> with its diff when it differs."""
    failed = sum(not c.passed for c in cases)
    root = ET.Element("testsuites", tests=str(len(cases)), failures=str(failed))
    ts = ET.SubElement(
        root, "testsuite", name=suite, tests=str(len(cases)), failures=str(failed), errors="0"
    )
    for case in cases:
        tc = ET.SubElement(
            ts, "testcase", classname=f"aclgate.check.{suite}", name=f"{case.line}: {case.name}"
        )
        if not case.passed:
            failure = ET.SubElement(
                tc,
                "failure",
                message=f"expected {case.expected_line()}, got {case.actual_line()}",
                type="PolicyDifference",
            )
            failure.text = case.diff() + json.dumps(case.query, ensure_ascii=False) + "\n"
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
