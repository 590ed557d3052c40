"""The users file and `aclgate users`: salted credentials only, atomic, concurrent-safe."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from aclgate.protocol.identity.sasl import create_server
from aclgate.protocol.identity.sasl.client import PlainSaslClient, ScramSaslClient
from aclgate.protocol.identity.sasl.credentials import PlainCredential, ScramCredential
from aclgate.proxy.cli import main
from aclgate.proxy.security.usersfile import (
    UsersFileError,
    add_user,
    load_users,
    parse_users,
    remove_user,
)

PASSWORD = "Tr0ub4dor&3-horse-battery"


def users_cli(*args: str, stdin: str | None = None, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aclgate", "users", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
        timeout=120,
        **kw,
    )


def test_add_list_remove_cli(tmp_path: Path) -> None:
    f = tmp_path / "users.json"
    r = users_cli(
        "add",
        "alice",
        "--users-file",
        str(f),
        "--mechanism",
        "SCRAM-SHA-512",
        "--mechanism",
        "PLAIN",
        "--password-stdin",
        stdin=PASSWORD + "\n",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "added user alice (PLAIN, SCRAM-SHA-512)\n"
    r = users_cli(
        "add",
        "bob",
        "--users-file",
        str(f),
        "--mechanism",
        "SCRAM-SHA-256,SCRAM-SHA-512",
        "--password-stdin",
        "--iterations",
        "4096",
        stdin="pw",
    )
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    r = users_cli("list", "--users-file", str(f))
    assert r.stdout == "alice\tPLAIN,SCRAM-SHA-512\nbob\tSCRAM-SHA-256,SCRAM-SHA-512\n"
    doc = json.loads(f.read_text())
    assert doc["version"] == 1
    assert doc["users"]["bob"]["SCRAM-SHA-256"]["iterations"] == 4096
    assert doc["users"]["alice"]["SCRAM-SHA-512"]["iterations"] == 8192
    r = users_cli("add", "alice", "--users-file", str(f), "--password-stdin", stdin="new")
    assert r.stdout == "updated user alice (SCRAM-SHA-512)\n"
    assert users_cli("remove", "bob", "--users-file", str(f)).returncode == 0
    r = users_cli("remove", "bob", "--users-file", str(f))
    assert r.returncode == 1 and "no user 'bob'" in r.stderr
    assert users_cli("list", "--users-file", str(f)).stdout == "alice\tSCRAM-SHA-512\n"


def test_cli_refusals(tmp_path: Path) -> None:
    f = tmp_path / "u.json"
    r = users_cli("add", "x", "--users-file", str(f), stdin="")  # no terminal, no --password-stdin
    assert r.returncode == 1 and "use --password-stdin" in r.stderr
    r = users_cli("add", "x", "--users-file", str(f), "--password-stdin", stdin="\n")
    assert r.returncode == 1 and "must not be empty" in r.stderr
    r = users_cli(
        "add", "x", "--users-file", str(f), "--password-stdin", "--mechanism", "GSSAPI", stdin="pw"
    )
    assert r.returncode == 1 and "unknown mechanism 'GSSAPI'" in r.stderr
    r = users_cli(
        "add", "x", "--users-file", str(f), "--password-stdin", "--iterations", "100", stdin="pw"
    )
    assert r.returncode == 1 and "--iterations must be between 4096 and 16384" in r.stderr
    r = users_cli("add", "x", "--users-file", str(f), "--password", "pw")
    assert r.returncode == 2  # there is no way to give a password in argv
    assert not f.exists()
    assert users_cli("list", "--users-file", str(f)).returncode == 1


def test_corrupt_file(tmp_path: Path) -> None:
    f = tmp_path / "u.json"
    f.write_text('{"version": 1, "users": {"a": ')
    os.chmod(f, 0o600)
    r = users_cli("list", "--users-file", str(f))
    assert r.returncode == 1 and "corrupt users file" in r.stderr
    r = users_cli("add", "b", "--users-file", str(f), "--password-stdin", stdin="pw")
    assert r.returncode == 1 and "corrupt users file" in r.stderr
    assert f.read_text() == '{"version": 1, "users": {"a": '  # left alone
    for text, msg in [
        ('{"version": 2, "users": {}}', "unsupported users file version 2"),
        ('{"version": 1}', "corrupt users file"),
        (
            '{"version": 1, "users": {"a": {"PLAIN": {"alg": "md5"}}}}',
            "corrupt PLAIN credential for user 'a'",
        ),
        (
            '{"version": 1, "users": {"a": {"SCRAM-SHA-256": {"salt": "AA==", "stored_key": "AA==", "server_key": "AA==", "iterations": 4096}}}}',
            "keys must be 32 bytes",
        ),
    ]:
        with pytest.raises(UsersFileError, match=msg):
            parse_users(text)


def test_no_plaintext_anywhere(tmp_path: Path, caplog, capsys) -> None:
    caplog.set_level(logging.DEBUG)
    f = tmp_path / "u.json"
    add_user(f, "alice", PASSWORD, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    r = users_cli(
        "add",
        "carol",
        "--users-file",
        str(f),
        "--mechanism",
        "PLAIN",
        "--password-stdin",
        stdin=PASSWORD,
    )
    users = load_users(f)
    server = create_server("PLAIN", credentials=users)
    server.evaluate(PlainSaslClient("alice", PASSWORD).initial_response())
    bad = create_server("PLAIN", credentials=users)
    with pytest.raises(Exception):  # noqa: B017 - any failure will do, the message is checked below
        bad.evaluate(PlainSaslClient("alice", PASSWORD + "x").initial_response())
    captured = capsys.readouterr()
    blobs = [f.read_bytes().decode(), r.stdout, r.stderr, captured.out, captured.err, caplog.text]
    blobs += [p.read_text(errors="replace") for p in tmp_path.iterdir() if p.is_file()]
    for blob in blobs:
        assert PASSWORD not in blob
        assert PASSWORD.encode().hex() not in blob


def test_loaded_users_authenticate(tmp_path: Path) -> None:
    f = tmp_path / "u.json"
    add_user(f, "alice", PASSWORD, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], iterations=4096)
    users = load_users(f)
    assert isinstance(users.credentials_for("alice", "PLAIN"), PlainCredential)
    assert isinstance(users.credentials_for("alice", "SCRAM-SHA-256"), ScramCredential)
    assert users.credentials_for("alice", "OAUTHBEARER") is None
    assert users.credentials_for("nobody", "PLAIN") is None
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        server = create_server(mech, credentials=users)
        client = ScramSaslClient(mech, "alice", PASSWORD)
        reply = server.evaluate(client.initial_response())
        client.evaluate_challenge(server.evaluate(client.evaluate_challenge(reply)))
        assert server.authorization_id == "alice"
    with pytest.raises(TypeError):
        users.entries["eve"] = {}  # type: ignore[index]
    assert remove_user(f, "alice") and not remove_user(f, "alice")
    assert len(load_users(f)) == 0


def test_concurrent_adds_lose_nothing(tmp_path: Path) -> None:
    """Ten `aclgate users add` processes at once: every user ends up in the file."""
    f = tmp_path / "u.json"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "aclgate",
                "users",
                "add",
                f"user{i}",
                "--users-file",
                str(f),
                "--mechanism",
                "SCRAM-SHA-256",
                "--password-stdin",
                "--iterations",
                "4096",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parents[2],
        )
        for i in range(10)
    ]
    for i, p in enumerate(procs):
        _, err = p.communicate(f"pw{i}\n", timeout=120)
        assert p.returncode == 0, err
    users = load_users(f)
    assert users.names() == sorted(f"user{i}" for i in range(10))
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_world_readable_file_warns(tmp_path: Path, caplog) -> None:
    f = tmp_path / "u.json"
    add_user(f, "a", "pw", ["SCRAM-SHA-512"])
    os.chmod(f, 0o644)
    with caplog.at_level(logging.WARNING):
        load_users(f)
    assert "chmod 600" in caplog.text


def test_in_process_cli(tmp_path: Path, monkeypatch, capsys) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(PASSWORD + "\n"))
    assert (
        main(["users", "add", "zed", "--users-file", str(tmp_path / "u.json"), "--password-stdin"])
        == 0
    )
    assert PASSWORD not in capsys.readouterr().out
    assert main(["users", "list", "--users-file", str(tmp_path / "u.json")]) == 0
    assert capsys.readouterr().out == "zed\tSCRAM-SHA-512\n"


def _with_iterations(path: Path, user: str, mechanism: str, iterations: int) -> None:
    """Rewrite one stored credential's iteration count by hand (keys left as they were)."""
    doc = json.loads(path.read_text())
    doc["users"][user][mechanism]["iterations"] = iterations
    path.write_text(json.dumps(doc))
    os.chmod(path, 0o600)


@pytest.mark.parametrize("iterations", [1, 4095, 16385, 10**9])
def test_scram_iterations_outside_kafkas_range_are_refused(tmp_path: Path, iterations) -> None:
    """Issue 20: iterations 1 or 10^9 loaded silently (Kafka creates only 4096-16384); now the
    load fails naming the user, the mechanism and the range, and `aclgate users` can still
    replace or remove that user."""
    f = tmp_path / "u.json"
    add_user(f, "alice", PASSWORD, ["SCRAM-SHA-256"], iterations=4096)
    add_user(f, "bob", PASSWORD, ["SCRAM-SHA-512"], iterations=16384)
    assert len(load_users(f)) == 2  # the limits themselves are accepted
    _with_iterations(f, "bob", "SCRAM-SHA-512", iterations)
    expected = (
        f"{f}: SCRAM-SHA-512 credential for user 'bob': iterations must be between 4096 and "
        f"16384 (Kafka's range), got {iterations}"
    )
    with pytest.raises(UsersFileError) as refused:
        load_users(f)
    assert str(refused.value) == expected
    listed = users_cli("list", "--users-file", str(f))
    assert listed.returncode == 1 and listed.stderr == f"aclgate users list: {expected}\n"
    replaced = users_cli("add", "bob", "--users-file", str(f), "--password-stdin", stdin="pw")
    assert replaced.returncode == 0, replaced.stderr
    assert load_users(f).names() == ["alice", "bob"]
    _with_iterations(f, "bob", "SCRAM-SHA-512", iterations)
    assert remove_user(f, "bob") and load_users(f).names() == ["alice"]


@pytest.mark.parametrize("iterations", ["4095", "16385", "1000000000"])
def test_cli_add_refuses_iterations_outside_kafkas_range(tmp_path: Path, iterations) -> None:
    f = tmp_path / "u.json"
    r = users_cli(
        "add", "x", "--users-file", str(f), "--password-stdin", "--iterations", iterations,
        stdin="pw",
    )  # fmt: skip
    assert r.returncode == 1
    assert r.stderr == (
        "aclgate users add: --iterations must be between 4096 and 16384 (Kafka's range), "
        f"got {iterations}\n"
    )
    assert not f.exists()
