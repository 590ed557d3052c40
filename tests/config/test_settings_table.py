"""The settings table (proxy/config.py: ProxyConfig, GROUPS, RELOADED) and its three views:
`aclgate serve --help`, docs/configuration.md and examples/aclgate.toml, each checked against
the table so that none can drift from the flags the proxy really has."""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from aclgate.proxy import config as config_module
from aclgate.proxy.cli import serve
from aclgate.proxy.config import GROUPS, RELOADED, ProxyConfig, from_args, settings
from aclgate.proxy.settingsdoc import render

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "aclgate.toml"


def serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aclgate serve")
    serve.configure(parser)
    return parser


def test_every_setting_is_in_exactly_one_group():
    fields = [f.name for f in dataclasses.fields(ProxyConfig) if "help" in f.metadata]
    table = settings()
    assert sorted(s.name for s in table) == sorted(fields)
    assert [g for g, *_ in GROUPS] == [
        "listeners", "identity", "upstream", "acls", "audit", "limits", "operations",
    ]  # fmt: skip
    assert set(RELOADED) <= set(fields), "a reload note for a setting that does not exist"
    assert {s.name: s.reload for s in table}["users_file"].startswith("contents reloaded")
    assert {s.name: s.reload for s in table}["listen"] == "restart"


def test_a_setting_missing_from_the_groups_is_refused(monkeypatch):
    """A new ProxyConfig field that nobody placed cannot silently vanish from the views:
    the parser (and so `aclgate serve`) cannot be built."""
    first = GROUPS[0]
    monkeypatch.setattr(
        config_module, "GROUPS", ((first[0], first[1], first[2], first[3][1:]), *GROUPS[1:])
    )
    with pytest.raises(RuntimeError, match=r"not placed \['listen'\]"):
        serve_parser()


def test_the_parser_is_grouped_in_the_tables_order():
    parser = serve_parser()
    titles = [title for _, title, _, _ in GROUPS]
    groups = {g.title: g for g in parser._action_groups}
    assert [g.title for g in parser._action_groups if g.title in titles] == titles
    for group, title, _, _ in GROUPS:
        flags = [a.option_strings[0] for a in groups[title]._group_actions]
        assert flags == [s.flag for s in settings() if s.group == group]


def test_serve_help_shows_the_groups_in_order():
    out = subprocess.run(
        [sys.executable, "-m", "aclgate", "serve", "--help"],
        capture_output=True, text=True, check=True, cwd=REPO,
    ).stdout  # fmt: skip
    headings = [line[:-1] for line in out.splitlines() if line[:-1] in dict.fromkeys(
        title for _, title, _, _ in GROUPS
    ) and line.endswith(":")]  # fmt: skip
    assert headings == [title for _, title, _, _ in GROUPS]
    # the usage line no longer lists every flag before the help
    assert out.startswith("usage: aclgate serve")
    assert len(out.split("\n\n")[0].splitlines()) <= 3
    for s in settings():
        assert s.flag in out


def test_docs_are_generated_from_the_table():
    """`python -m aclgate.proxy.settingsdoc > docs/configuration.md` after changing a setting."""
    page = (REPO / "docs" / "configuration.md").read_text()
    assert page == render()
    for s in settings():
        assert f"### `{s.toml_key}`" in page and f"`{s.flag}" in page


def test_the_doc_generator_runs_as_a_module():
    out = subprocess.run(
        [sys.executable, "-m", "aclgate.proxy.settingsdoc"],
        capture_output=True, text=True, check=True, cwd=REPO,
    ).stdout  # fmt: skip
    assert out == render()


def example_in(tmp_path: Path) -> Path:
    """examples/aclgate.toml with its /etc and /var paths moved under tmp_path, and the files
    it names created, so that the real loader checks it end to end."""
    text = EXAMPLE.read_text()
    text = text.replace("/etc/aclgate", str(tmp_path / "etc")).replace(
        "/var/lib/aclgate", str(tmp_path / "var")
    )
    for path in re.findall(r'"(' + re.escape(str(tmp_path)) + r'[^"]*)"', text):
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        if file.suffix or "password" in file.name:
            file.write_text("secret\n")
    target = tmp_path / "aclgate.toml"
    target.write_text(text)
    return target


def test_the_example_is_a_production_sasl_ssl_deployment(tmp_path):
    path = example_in(tmp_path)
    config = from_args(serve_parser().parse_args(["--config", str(path)]))
    assert config.listener_security_protocol == "SASL_SSL"
    assert config.ssl_certfile and config.ssl_keyfile and config.users_file
    assert config.sasl_mechanism_list == ("SCRAM-SHA-512",)
    assert config.upstream_security_protocol == "SASL_SSL" and config.upstream_ssl_cafile
    assert config.upstream_sasl_username and config.upstream_sasl_password_file
    assert config.acl_store == "kafka" and config.acl_transactional_id
    assert config.audit_topic and config.audit_spool_dir
    assert config.audit_spool_max_bytes == 1 << 30
    assert config.metrics_listen == ("0.0.0.0", 9404)
    assert config.broker_ports == (19092, 19191) and config.workers >= 1
    assert len(config.upstream) == 3


def test_every_key_of_the_example_is_a_setting_and_every_group_is_shown():
    keys = tomllib.loads(EXAMPLE.read_text())
    table = {s.toml_key: s for s in settings()}
    assert set(keys) <= set(table), f"unknown keys: {set(keys) - set(table)}"
    assert {table[k].group for k in keys} == {g for g, *_ in GROUPS}
    # its sections follow the table's order
    order = [g for g, *_ in GROUPS]
    seen = [table[k].group for k in keys]
    assert seen == sorted(seen, key=order.index)


def test_the_example_with_a_missing_file_names_the_key_and_the_file(tmp_path):
    path = example_in(tmp_path)
    (tmp_path / "etc" / "users.json").unlink()
    with pytest.raises(config_module.ConfigError) as caught:
        from_args(serve_parser().parse_args(["--config", str(path)]))
    assert str(caught.value) == (f'{path}: users_file = "{tmp_path}/etc/users.json": no such file')
