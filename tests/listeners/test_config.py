"""Security settings are checked when the configuration is built, with a message that says
what is missing, instead of failing later (or silently doing less) at run time."""

from __future__ import annotations

import subprocess
import sys

import pytest

from aclgate.proxy.config import ConfigError
from tests.fixtures.proxy import make_config


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"listener_security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": "PLAIN"},
            "--users-file",
        ),
        ({"listener_security_protocol": "SSL"}, "--ssl-certfile"),
        ({"proxy_protocol": True}, "--proxy-protocol-trusted"),
        (
            {"listener_security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": "OAUTHBEARER"},
            "--sasl-oauthbearer-jwks-file",
        ),
        ({"upstream_security_protocol": "SASL_SSL"}, "--upstream-sasl-username"),
        ({"users_file": "/nonexistent/users.json"}, "does not exist"),
    ],
)
def test_incomplete_security_settings_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        make_config("127.0.0.1:9092", **settings)


def test_serve_reports_the_problem_and_exits(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "aclgate",
            "serve",
            "--upstream",
            "127.0.0.1:9",
            "--listener-security-protocol",
            "SASL_PLAINTEXT",
            "--sasl-mechanisms",
            "SCRAM-SHA-512",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "--users-file" in out.stderr
