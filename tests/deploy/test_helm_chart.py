"""deploy/helm/aclgate: linted (`helm lint --strict`), rendered (`helm template`), and the
rendered manifests checked against what the proxy really serves: the ports in the TOML the
chart writes are the ports the pod and the Service expose, the probes ask /healthz and
/readyz on the metrics port, and --workers follows the CPU limit. Finally the rendered
settings and arguments are run: `aclgate serve` with them in front of a tansu broker answers
the liveness and readiness probes as the kubelet would ask them.

helm is built from its Go module into .cache/deploy/bin (tests/deploy/tools.py).
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from aclgate.proxy.config import ProxyConfig, load_toml
from tests.deploy.tools import REPO, require
from tests.fixtures.ports import free_port_block
from tests.fixtures.wait import wait_until

CHART = REPO / "deploy" / "helm" / "aclgate"


def _helm(*args: str) -> str:
    done = subprocess.run([require("helm"), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _render(*sets: str) -> dict[str, Any]:
    """The rendered manifests by kind (a list for kinds that repeat)."""
    args = [arg for s in sets for arg in ("--set", s)]
    docs = [d for d in yaml.safe_load_all(_helm("template", "demo", str(CHART), *args)) if d]
    by_kind: dict[str, Any] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    return by_kind


def _settings(manifests: dict[str, Any], tmp_path: Path) -> ProxyConfig:
    """The TOML the chart writes, read by aclgate's own loader."""
    (config,) = [c for c in manifests["ConfigMap"] if "aclgate.toml" in c["data"]]
    path = tmp_path / "aclgate.toml"
    path.write_text(config["data"]["aclgate.toml"])
    return ProxyConfig(**load_toml(path))


def _container(manifests: dict[str, Any]) -> dict[str, Any]:
    (deployment,) = manifests["Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def test_helm_lint_passes() -> None:
    _helm("lint", "--strict", str(CHART))
    _helm(
        "lint",
        "--strict",
        str(CHART),
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "secrets.pw=x",
    )


def test_helm_lint_catches_a_broken_chart(tmp_path: Path) -> None:
    broken = tmp_path / "aclgate"
    subprocess.run(["cp", "-r", str(CHART), str(broken)], check=True)
    service = broken / "templates" / "service.yaml"
    service.write_text(service.read_text().replace("{{- end }}", "", 1))
    done = subprocess.run([require("helm"), "lint", str(broken)], capture_output=True, text=True)
    assert done.returncode != 0


def test_the_pod_and_service_expose_the_ports_aclgate_listens_on(tmp_path: Path) -> None:
    manifests = _render()
    config = _settings(manifests, tmp_path)
    assert config.broker_ports is not None and config.metrics_listen is not None
    container = _container(manifests)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports.pop("bootstrap") == config.listen[1]
    assert ports.pop("metrics") == config.metrics_listen[1]
    first, last = config.broker_ports
    assert sorted(ports.values()) == list(range(first, last + 1))
    (service,) = manifests["Service"]
    served = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert served == {
        name: (port, name)
        for name, port in {
            **ports,
            "bootstrap": config.listen[1],
            "metrics": config.metrics_listen[1],
        }.items()
    }
    # the pods answer on every address: the listeners bind 0.0.0.0
    assert config.listen[0] == config.metrics_listen[0] == "0.0.0.0"


def test_the_probes_ask_the_health_endpoints_on_the_metrics_port() -> None:
    container = _container(_render())
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["args"][:3] == ["serve", "--config", "/etc/aclgate/aclgate.toml"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/etc/aclgate/aclgate.toml"]["subPath"] == "aclgate.toml"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


@pytest.mark.parametrize(
    ("cpu", "workers"), [("2", "2"), ("1500m", "2"), ("250m", "1"), ("3", "3"), ("0.5", "1")]
)
def test_workers_follow_the_cpu_limit(cpu: str, workers: str) -> None:
    args = _container(_render(f"resources.limits.cpu={cpu}"))["args"]
    assert args[args.index("--workers") + 1] == workers
    # an explicit value wins
    args = _container(_render(f"resources.limits.cpu={cpu}", "workers=5"))["args"]
    assert args[args.index("--workers") + 1] == "5"


def test_optional_objects(tmp_path: Path) -> None:
    plain = _render()
    assert set(plain) == {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget"}
    full = _render("serviceMonitor.enabled=true", "secrets.upstream-password=s3cret")
    (monitor,) = full["ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    (secret,) = full["Secret"]
    assert set(secret["data"]) == {"upstream-password"}
    (pdb,) = full["PodDisruptionBudget"]
    (deployment,) = full["Deployment"]
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]


def test_settings_pass_into_the_toml(tmp_path: Path) -> None:
    manifests = _render("settings.max_connections=100", "settings.super_user={User:admin,User:ops}")
    config = _settings(manifests, tmp_path)
    assert config.max_connections == 100
    assert config.super_user == ["User:admin", "User:ops"]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def test_the_rendered_pod_serves_its_probes(tansu: Any, tmp_path: Path) -> None:
    """The chart's TOML and arguments, run: the probes' ports and paths answer 200."""
    block = free_port_block(5)
    manifests = _render(
        f"upstream={{{tansu.bootstrap}}}",
        f"ports.bootstrap={block}",
        f"ports.metrics={block + 1}",
        f"brokerPorts.first={block + 2}",
        "brokerPorts.count=3",
        "resources.limits.cpu=2",
    )
    toml = next(c for c in manifests["ConfigMap"] if "aclgate.toml" in c["data"])["data"][
        "aclgate.toml"
    ]
    acls = next(c for c in manifests["ConfigMap"] if "acls.json" in c["data"])["data"]["acls.json"]
    (tmp_path / "acls.json").write_text(acls)
    config = tmp_path / "aclgate.toml"
    config.write_text(toml.replace("/etc/aclgate/acls/acls.json", str(tmp_path / "acls.json")))
    container = _container(manifests)
    args = [str(config) if a == "/etc/aclgate/aclgate.toml" else a for a in container["args"]]
    assert args[args.index("--workers") + 1] == "2"
    probes = {
        kind: f"http://127.0.0.1:{block + 1}{container[kind]['httpGet']['path']}"
        for kind in ("livenessProbe", "readinessProbe")
    }
    aclgate = REPO / ".venv" / "bin" / "aclgate"
    log = (tmp_path / "serve.log").open("w")
    with subprocess.Popen([str(aclgate), *args], stderr=log, stdout=log) as proc:
        try:
            wait_until(lambda: _get(probes["readinessProbe"])[0] == 200, timeout=30, what="ready")
            _, body = _get(probes["readinessProbe"])
            assert json.loads(body)["upstream_reachable"] is True
            assert _get(probes["livenessProbe"])[0] == 200
        finally:
            proc.terminate()
            proc.wait(timeout=30)
