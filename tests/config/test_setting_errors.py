"""Errors name a setting the way the user wrote it: the flag (and the value given) when it came
from the command line, the file and the key when it came from the TOML file, so the message
points at the line to fix."""

from __future__ import annotations

import argparse
import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from aclgate.proxy.cli import serve
from aclgate.proxy.config import ConfigError, ProxyConfig, from_args

REPO = Path(__file__).resolve().parents[2]


def load(argv: list[str]) -> ProxyConfig:
    parser = argparse.ArgumentParser()
    serve.configure(parser)
    return from_args(parser.parse_args(argv))


def error(argv: list[str]) -> str:
    with pytest.raises(ConfigError) as caught:
        load(argv)
    return str(caught.value)


@pytest.fixture
def toml(tmp_path, monkeypatch):
    """Writes aclgate.toml in a fresh working directory and returns its relative name."""
    monkeypatch.chdir(tmp_path)

    def write(text: str) -> str:
        Path("aclgate.toml").write_text('upstream = ["k:9092"]\n' + text)
        return "aclgate.toml"

    return write


def test_a_missing_file_from_a_flag_names_the_flag():
    assert error(
        ["--upstream", "k:1", "--listener-security-protocol", "SSL",
         "--ssl-certfile", "pki/srv.crt", "--ssl-keyfile", "pki/srv.key"]
    ) == "--ssl-certfile pki/srv.crt: no such file"  # fmt: skip


def test_a_missing_file_from_toml_names_the_file_and_key(toml):
    path = toml(
        'listener_security_protocol = "SSL"\nssl_certfile = "pki/srv.crt"\n'
        'ssl_keyfile = "pki/srv.key"\n'
    )
    assert error(["--config", path]) == 'aclgate.toml: ssl_certfile = "pki/srv.crt": no such file'


def test_a_flag_overriding_the_file_is_named_as_the_flag(toml):
    path = toml('ssl_certfile = "pki/from-file.crt"\nlistener_security_protocol = "SSL"\n')
    message = error(
        ["--config", path, "--ssl-certfile", "pki/flag.crt", "--ssl-keyfile", "pki/flag.key"]
    )
    assert message == "--ssl-certfile pki/flag.crt: no such file"


def test_a_bad_value_names_the_flag_or_the_key(toml):
    assert error(["--upstream", "k:1", "--listen", "29193"]) == (
        "--listen: '29193' is not HOST:PORT"
    )
    assert error(["--config", toml('listen = "29193"\n')]) == (
        "aclgate.toml: listen = \"29193\": '29193' is not HOST:PORT"
    )
    # the key as written, dashes included
    assert error(["--config", toml('broker-ports = "9-1"\n')]).startswith(
        'aclgate.toml: broker-ports = "9-1": '
    )
    assert error(["--config", toml("early_start = 1\n")]) == (
        "aclgate.toml: early_start = 1: must be true or false, not 1"
    )


def test_an_out_of_range_value_names_the_flag_or_the_key(toml):
    assert error(["--upstream", "k:1", "--connect-timeout", "0"]) == (
        "--connect-timeout 0: must be positive"
    )
    assert error(["--config", toml("max_connections = -1\n")]) == (
        "aclgate.toml: max_connections = -1: must be 0 (no limit) or more"
    )


def test_a_setting_that_needs_another_is_named_as_written(toml):
    assert error(["--upstream", "k:1", "--listener-security-protocol", "SSL"]) == (
        "--listener-security-protocol SSL: SSL needs --ssl-certfile and --ssl-keyfile"
    )
    assert error(["--config", toml('workers = "3"\nlisten = ":0"\n')]) == (
        'aclgate.toml: workers = "3": more than 1 worker needs a fixed --listen port, not 0'
    )
    # a repeated flag is named without its values; the problem says which one
    assert error(
        ["--upstream", "k:1", "--super-user", "User:a", "--super-user", "nobody"]
    ).startswith("--super-user: ")


def test_without_from_args_the_message_uses_the_key():
    """ProxyConfig built in code (tests, the demo) has no flags: the key names it."""
    with pytest.raises(ConfigError, match=r"^ssl_certfile: /nonexistent.crt does not exist$"):
        ProxyConfig(
            upstream=[("k", 1)],
            listener_security_protocol="SSL",
            ssl_certfile=Path("/nonexistent.crt"),
            ssl_keyfile=Path("/nonexistent.key"),
        ).validate()


def serve_stderr(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "aclgate", "serve", "--upstream", "127.0.0.1:1", *args],
        capture_output=True, text=True, timeout=60, cwd=cwd, env=env,
    )  # fmt: skip


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_port_in_use_names_the_flag(tmp_path, taken_port):
    out = serve_stderr(["--listen", f"127.0.0.1:{taken_port}"], tmp_path)
    assert out.returncode == 1
    assert f"cannot start: --listen 127.0.0.1:{taken_port}: address already in use" in out.stderr
    assert "Traceback" not in out.stderr and "Errno" not in out.stderr


def test_a_port_in_use_names_the_flag_with_workers(tmp_path, taken_port):
    """With --workers the supervisor checks the ports before it starts any worker."""
    args = [
        "--listen",
        f"127.0.0.1:{taken_port}",
        "--workers",
        "2",
        "--broker-ports",
        "29990-29999",
    ]
    out = serve_stderr(args, tmp_path)
    assert out.returncode == 1
    assert f"cannot start: --listen 127.0.0.1:{taken_port}: address already in use" in out.stderr
    assert "Traceback" not in out.stderr and "Errno" not in out.stderr


def test_a_port_in_use_from_toml_names_the_key(tmp_path, taken_port):
    (tmp_path / "aclgate.toml").write_text(f'metrics_listen = "127.0.0.1:{taken_port}"\n')
    out = serve_stderr(["--config", "aclgate.toml", "--listen", "127.0.0.1:0"], tmp_path)
    assert out.returncode == 1
    assert (
        f'cannot start: aclgate.toml: metrics_listen = "127.0.0.1:{taken_port}": '
        "address already in use"
    ) in out.stderr


def test_a_broker_port_in_use_names_the_node_port(tmp_path, taken_port):
    out = serve_stderr(["--listen", "127.0.0.1:0", "--node-port", f"0={taken_port}"], tmp_path)
    assert out.returncode == 1
    assert f"cannot start: --node-port 0={taken_port}: cannot bind it" in out.stderr


def test_bind_errors_name_the_setting_as_written():
    """The other spellings without starting a proxy: a default, a range, an unrelated error."""
    config = load(["--upstream", "k:1", "--broker-ports", "19000-19010"])
    in_use = OSError(
        errno.EADDRINUSE,
        "error while attempting to bind on address ('127.0.0.1', 9092): address already in use",
    )
    assert serve.bind_error(config, in_use) == (
        "listen 127.0.0.1:9092 (the default): address already in use"
    )
    in_range = OSError(errno.EADDRINUSE, "bind on address ('127.0.0.1', 19003)")
    assert serve.bind_error(config, in_range) == (
        "--broker-ports 19000-19010: port 19003: address already in use"
    )
    other = OSError(errno.EMFILE, "too many open files")
    assert serve.bind_error(config, other) == str(other)
