"""deploy/prometheus/aclgate-alerts.yml: valid rules (`promtool check rules`), on metrics the
proxy really exports, and passing their unit tests (`promtool test rules`,
aclgate-alerts.test.yml: every alert fires on its bad series and stays quiet on the healthy
ones and before its `for:`). The tests themselves are shown to bite: an alert whose
expression never fires, or which fires at once without its `for:`, fails them.
"""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.deploy.tools import REPO, require

RULES = REPO / "deploy" / "prometheus" / "aclgate-alerts.yml"
TESTS = RULES.with_name("aclgate-alerts.test.yml")
ALERT = re.compile(r"^      - alert: (\w+)$", re.M)


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require("promtool"), *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_promtool_checks_the_rules() -> None:
    done = _promtool("check", "rules", RULES.name, cwd=RULES.parent)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_pass() -> None:
    done = _promtool("test", "rules", TESTS.name, cwd=TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_unit_tests() -> None:
    alerts = set(ALERT.findall(RULES.read_text()))
    tested = set(re.findall(r"alertname: (\w+)", TESTS.read_text()))
    assert alerts and alerts == tested


def test_the_rules_use_metrics_aclgate_exports() -> None:
    """Every metric a rule names is one proxy/ defines (a metric's name is a string literal
    there; counters gain _total in the exposition)."""
    defined = {
        name
        for path in (REPO / "proxy").rglob("*.py")
        for name in re.findall(r'"(aclgate_[a-z_]+)"', path.read_text())
    }
    used = set(re.findall(r"\baclgate_[a-z_]+", RULES.read_text()))
    assert {re.sub(r"_total$", "", name) for name in used} - defined == set()


def _tests_of(alert: str) -> str:
    """The unit test file with only the groups that test `alert` (the whole file takes a
    second of evaluation; one group a fraction)."""
    head, *groups = re.split(r"(?m)^(?=  - name: )", TESTS.read_text())
    return head + "".join(g for g in groups if f"alertname: {alert}\n" in g)


def _mutated(into: Path, alert: str, change: str) -> Path:
    """A copy of the rules and of the alert's tests in `into`, with the alert changed: its
    expression never true ("never"), or its `for:` gone ("no-for"); the copy's test file."""
    text = RULES.read_text()
    start = text.index(f"- alert: {alert}\n")
    end = text.find("\n      - alert:", start)
    end = len(text) if end < 0 else end
    block = text[start:end]
    if change == "never":
        block = re.sub(r"expr: (\|\n(?:          .*\n)+|.*\n)", "expr: vector(0) > 1\n", block)
    else:
        block = re.sub(r"        for: \w+\n", "", block)
    assert block != text[start:end]
    into.mkdir()
    (into / RULES.name).write_text(text[:start] + block + text[end:])
    tests = into / TESTS.name
    tests.write_text(_tests_of(alert))
    return tests


ALERTS = ALERT.findall(RULES.read_text())
WAITING = re.findall(r"- alert: (\w+)\n(?:(?!      - alert).*\n)*?        for:", RULES.read_text())


def test_the_unit_tests_catch_alerts_that_never_fire_or_fire_too_early(tmp_path: Path) -> None:
    """Each alert changed in turn: its unit tests fail."""
    assert len(WAITING) >= 8
    cases = [(a, c) for c, alerts in (("never", ALERTS), ("no-for", WAITING)) for a in alerts]

    def run(case: tuple[str, str]) -> tuple[str, str, int]:
        alert, change = case
        tests = _mutated(tmp_path / f"{alert}-{change}", alert, change)
        return alert, change, _promtool("test", "rules", tests.name, cwd=tests.parent).returncode

    with ThreadPoolExecutor(2) as pool:
        passed = [f"{a} {c}" for a, c, rc in pool.map(run, cases) if rc == 0]
    assert passed == [], f"the unit tests did not notice: {passed}"


def test_each_alert_alone_passes_its_tests(tmp_path: Path) -> None:
    """The mutation test's control: the alert's own groups pass unchanged."""
    (tmp_path / RULES.name).write_text(RULES.read_text())
    for alert in ALERTS:
        (tmp_path / TESTS.name).write_text(_tests_of(alert))
        done = _promtool("test", "rules", TESTS.name, cwd=tmp_path)
        assert done.returncode == 0, alert + done.stdout + done.stderr
