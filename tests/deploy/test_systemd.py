"""deploy/systemd/aclgate.service: valid for systemd (`systemd-analyze verify`), hardened
(`systemd-analyze security --offline`: the exposure score, and the settings docs/deploy.md
promises), and pointing at settings aclgate accepts.

systemd-analyze runs here without systemd as PID 1 (verify and offline security only read
unit files). The unit names /opt/aclgate/bin/aclgate, which verify checks is executable: the
test verifies a copy whose ExecStart names this checkout's aclgate instead.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from aclgate.proxy.config import ProxyConfig, load_toml
from tests.deploy.tools import REPO, require

UNIT = REPO / "deploy" / "systemd" / "aclgate.service"
INSTALLED = "/opt/aclgate/bin/aclgate"
#: `systemd-analyze security` rates 0 (locked down) to 10 (exposed); the unit scores 1.2 on
#: systemd 252: anything above 2.0 means hardening was lost
MAX_EXPOSURE = 2.0


def _service(text: str) -> dict[str, list[str]]:
    """The [Service] section's settings (a key may repeat: every value, in order)."""
    settings: dict[str, list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service":
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


@pytest.fixture
def unit(tmp_path: Path) -> Path:
    """The unit, with ExecStart naming this checkout's aclgate (verify checks it exists)."""
    aclgate = REPO / ".venv" / "bin" / "aclgate"
    assert aclgate.exists(), "make's venv has no aclgate"
    copy = tmp_path / UNIT.name
    text = UNIT.read_text()
    assert INSTALLED in text
    copy.write_text(text.replace(INSTALLED, str(aclgate)))
    return copy


def test_systemd_analyze_verify_accepts_the_unit(unit: Path) -> None:
    tool = require("systemd-analyze")
    done = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    # verify exits 0 on unknown keys and misspelt values too, with a line on stderr for each
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr


def test_systemd_analyze_verify_catches_a_broken_unit(unit: Path) -> None:
    """The check above would see a mistake: a misspelt setting and a missing binary."""
    tool = require("systemd-analyze")
    unit.write_text(unit.read_text().replace("ProtectHome=", "ProtectHomes=", 1))
    done = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert "Unknown key 'ProtectHomes'" in done.stderr
    assert (
        subprocess.run(
            [tool, "verify", str(UNIT)], capture_output=True, text=True, timeout=60
        ).returncode
        != 0
    ), "verify should refuse an ExecStart that does not exist"


def _exposure(tool: str, unit: Path) -> float:
    done = subprocess.run(
        [tool, "security", "--offline=true", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    line = next(ln for ln in done.stdout.splitlines() if "Overall exposure level" in ln)
    return float(line.split(":")[1].split()[0])


def test_the_unit_is_hardened(unit: Path) -> None:
    tool = require("systemd-analyze")
    exposure = _exposure(tool, unit)
    assert exposure <= MAX_EXPOSURE, f"exposure {exposure} > {MAX_EXPOSURE}"
    # and the score moves: without the sandbox the same unit rates far worse
    bare = unit.parent / "bare.service"
    kept = ("[", "Description", "ExecStart", "Type", "WantedBy", "After", "Wants", "Documentation")
    bare.write_text(
        "\n".join(ln for ln in unit.read_text().splitlines() if ln.startswith(kept)) + "\n"
    )
    assert _exposure(tool, bare) > 5


def test_the_unit_settings_the_deployment_relies_on() -> None:
    service = _service(UNIT.read_text())
    one = {key: values[-1] for key, values in service.items()}
    assert one["DynamicUser"] == "yes"  # its own user
    assert one["NoNewPrivileges"] == "yes"
    assert one["ProtectSystem"] == "strict" and one["ProtectHome"] == "yes"
    assert one["PrivateTmp"] == "yes"
    assert one["CapabilityBoundingSet"] == "" and one["AmbientCapabilities"] == ""
    # the writable places the example settings use
    assert one["StateDirectory"] == "aclgate" and one["LogsDirectory"] == "aclgate"
    # room for the fd budget: two descriptors a connection (docs/operations.md)
    assert int(one["LimitNOFILE"]) >= 65536 * 2
    # aclgate handles SIGINT/SIGTERM only: a SIGHUP "reload" would stop it
    assert "ExecReload" not in service
    assert one["ExecStart"].startswith(f"{INSTALLED} serve --config /etc/aclgate/aclgate.toml")


def test_sighup_stops_serve(tmp_path: Path) -> None:
    """Why the unit has no ExecReload=: `aclgate serve` does not handle SIGHUP, so a reload by
    signal would end the proxy (if this fails, serve now handles it: add ExecReload=)."""
    aclgate = REPO / ".venv" / "bin" / "aclgate"
    args = ["serve", "--upstream", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--log-level", "INFO"]
    args += ["--acl-file", str(tmp_path / "acls.json"), "--acl-file-missing-ok"]
    with subprocess.Popen([str(aclgate), *args], stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:  # up once it listens
            if "listening on" in line:
                break
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=10) == -signal.SIGHUP


def test_the_example_settings_are_settings_aclgate_knows() -> None:
    """Every key of the example TOML is a setting, with a value of the right kind."""
    values = load_toml(REPO / "deploy" / "systemd" / "aclgate.toml")
    config = ProxyConfig(**values)
    state = _service(UNIT.read_text())
    assert str(config.acl_file).startswith("/var/lib/" + state["StateDirectory"][0] + "/")
    assert str(config.audit_file).startswith("/var/log/" + state["LogsDirectory"][0] + "/")
    assert config.metrics_listen is not None
