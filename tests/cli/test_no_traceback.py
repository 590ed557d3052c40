"""No `aclgate` command shows a traceback for a mistake of its user (issue 23 item 4).

Every command is run as a user runs it (the console script in a subprocess) with what a user
gets wrong: an unknown or mistyped option, a bad value, a missing file, a cluster that cannot
be reached or refuses the request, an output pipe closed early. Each must end with a non-zero
exit status and one line naming the problem, no traceback and no usage dump. The last tests
pin the other half: an exception of ours that is not a user's error keeps its traceback.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from aclgate.proxy import cli
from aclgate.proxy.cli.errors import CLOSED_PIPE_STATUS
from tests.authz.cli import ACLGATE
from tests.fixtures.wait import wait_until

pytestmark = pytest.mark.slow

#: a log line of `aclgate serve` (the ACL file loaded, a warning about the settings, ...):
#: only one at ERROR names the problem
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\S+ (?!ERROR|CRITICAL)[A-Z]+ ")

QUERY = {
    "principal": "User:bob",
    "host": "10.0.0.1",
    "operation": "READ",
    "resource_type": "TOPIC",
    "resource_name": "orders",
}


def _acl(topic: str) -> dict[str, str]:
    return {"resource_type": "TOPIC", "resource_name": topic, "pattern_type": "LITERAL",
            "principal": "User:bob", "host": "*", "operation": "READ",
            "permission_type": "ALLOW"}  # fmt: skip


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with what the cases name: good and bad ACL, query and users files, and a
    regular file `afile` (a path below it cannot exist, even for root)."""
    d = tmp_path_factory.mktemp("cli")
    (d / "acls.json").write_text(json.dumps({"version": 1, "acls": [_acl("orders")]}))
    # enough output that a reader closing after one line finds the writer still writing
    many = [_acl(f"topic-{i:05d}") for i in range(3000)]
    (d / "many.json").write_text(json.dumps({"version": 1, "acls": many}))
    (d / "bad.json").write_text("{not json")
    (d / "queries.jsonl").write_text(json.dumps(QUERY) + "\n")
    (d / "many.jsonl").write_text((json.dumps(QUERY) + "\n") * 20_000)
    (d / "bad.jsonl").write_text('{"principal": "User:bob"}\n')
    # every query expected otherwise: --expect reports each of them
    (d / "expect.jsonl").write_text(json.dumps({**QUERY, "expect": "DENIED"}) + "\n")
    (d / "expect-many.jsonl").write_text(
        (json.dumps({**QUERY, "expect": "DENIED"}) + "\n") * 20_000
    )
    (d / "users.json").write_text("{not json")
    (d / "users.json").chmod(0o600)
    entry = {"PLAIN": {"alg": "scrypt", "hash": "vMcIAklKlkSYAlVM9l/xZ1axEQUC1Z1GNUyN9fURxWM=",
                       "n": 16384, "p": 1, "r": 8, "salt": "jy4gvQMuciS9fAuVU4+Aqg=="}}  # fmt: skip
    users = {f"user-{i:05d}": entry for i in range(20_000)}
    (d / "many-users.json").write_text(json.dumps({"version": 1, "users": users}))
    (d / "many-users.json").chmod(0o600)
    (d / "afile").write_text("a regular file\n")
    (d / "bad.toml").write_text("upstream = [\n")
    return d


MISSING = "afile/missing"

#: (argv, what the error line must say); run in `work`
CASES: list[tuple[list[str], str]] = [
    # the command itself
    (["chek"], "unknown command 'chek'; did you mean check?"),
    (["--verison"], "unrecognized option --verison; did you mean --version?"),
    # serve: options, values, files (the settings themselves are another part's)
    (["serve", "--upstrem", "127.0.0.1:1"], "did you mean --upstream?"),
    (["serve", "--upstream", "127.0.0.1:1", "--listen", "nope"], "'nope' is not HOST:PORT"),
    (["serve", "--config", MISSING], MISSING),
    (["serve", "--config", "bad.toml"], "bad.toml"),
    (["serve", "--upstream", "127.0.0.1:1", "--acl-file", "bad.json"], "bad.json"),
    # demo
    (["demo", "--lissten", "127.0.0.1:1"], "did you mean --listen?"),
    (["demo", "--listen", "nope"], "'nope' is not HOST:PORT"),
    (["demo", "--log-level", "LOUD"], "invalid choice: 'LOUD'"),
    # acls (kafka-acls' messages and exit status 1, then a pointer to --help)
    (["acls", "--acl-file", "acls.json", "--add", "--alow-principal", "User:x", "--topic", "t"],
     "unrecognized option --alow-principal; did you mean --allow-principal?"),
    (["acls", "--acl-file", "acls.json", "--list", "--no-such-option"],
     "unrecognized option --no-such-option"),
    (["acls", "--acl-file", "acls.json", "--list", "--resource-pattern-type", "bogus"],
     "Value [bogus] is not one of"),
    (["acls", "--acl-file", MISSING, "--list"], MISSING),
    (["acls", "--acl-file", "bad.json", "--list"], "bad.json"),
    (["acls", "--acl-store", "kafka", "--acl-bootstrap", "127.0.0.1:1", "--acl-timeout", "2",
      "--list"], "127.0.0.1:1"),
    (["acls", "--bootstrap-server", "127.0.0.1:1", "--list"], "cannot connect to 127.0.0.1:1"),
    (["acls", "import", "--from-file", MISSING, "--acl-file", "out.json"], MISSING),
    # check
    (["check", "--acl-file", "acls.json", "--querys", "queries.jsonl"],
     "did you mean --queries?"),
    (["check", "--acl-file", "acls.json"], "the following arguments are required: --queries"),
    (["check", "--acl-file", "acls.json", "--queries", MISSING], MISSING),
    (["check", "--acl-file", "bad.json", "--queries", "queries.jsonl"], "bad.json"),
    (["check", "--acl-file", "acls.json", "--queries", "bad.jsonl"], "bad.jsonl:1"),
    (["check", "--acl-file", "acls.json", "--queries", "queries.jsonl", "--junit-xml", "x"],
     "--junit-xml needs --expect"),
    (["check", "--acl-file", "acls.json", "--queries", "expect.jsonl", "--expect",
      "--junit-xml", MISSING], MISSING),
    # users
    (["users", "list", "--users-file", MISSING], MISSING),
    (["users", "list", "--users-file", "users.json"], "corrupt users file"),
    (["users", "add", "bob", "--users-file", "u.json"], "use --password-stdin"),
    (["users", "add", "bob", "--users-file", "u.json", "--mechanism", "GSSAPI",
      "--password-stdin"], "GSSAPI"),
    (["users", "ad", "bob"], "invalid choice: 'ad'"),
    (["users", "list", "--user-file", "u.json"], "did you mean --users-file?"),
    # certs
    (["certs", "server", "--out", "afile", "--dns", "x"], "afile"),
    (["certs", "init", "--out", MISSING], MISSING),
    (["certs", "client", "--out", ".", "--nmae", "x"], "did you mean --name?"),
    # the Spark commands: what is checked before Spark starts
    (["report", "--out", "r", "--audit", "a", "--bogus"], "unrecognized option --bogus"),
    (["advise", "--audti", "a.jsonl"], "did you mean --audit?"),
    (["whatif", "--candidates", "x"], "unrecognized option --candidates"),
    (["stream", "--kafka-bootstrp", "x:1"], "did you mean --kafka-bootstrap?"),
    (["audit-sample", "--events", "many", "--out", "x"], "invalid int value: 'many'"),
    (["audit-sample", "--events", "1", "--out", "x", "--start", "soon"],
     "not an ISO-8601 time: 'soon'"),
    # shell completion
    (["completion", "fish"], "invalid choice: 'fish'"),
    (["completion", "bash", "--shel", "x"], "unrecognized option --shel"),
]  # fmt: skip


def _aclgate(args: list[str], cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ACLGATE, *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def assert_one_clear_line(result: subprocess.CompletedProcess[str], says: str) -> None:
    """Non-zero, no traceback, no usage dump; the line naming the problem says `says`."""
    shown = f"exit {result.returncode}\n{result.stderr}"
    assert result.returncode not in (0, None), shown
    assert "Traceback" not in result.stderr, shown
    assert "usage:" not in result.stderr, shown
    lines = [line for line in result.stderr.splitlines() if not LOG_LINE.match(line)]
    # the line, and for `acls` kafka-acls' message followed by "see `aclgate acls --help`"
    assert 1 <= len(lines) <= 2, shown
    assert says in lines[0], shown
    if len(lines) == 2:
        assert lines[1].startswith("see `aclgate "), shown


@pytest.fixture(scope="module")
def results(work: Path) -> dict[int, subprocess.CompletedProcess[str]]:
    """Every case at once: the unreachable cluster cases wait for their timeouts in
    parallel with the rest (kafka-python's bootstrap gives up after 30 s)."""
    with ThreadPoolExecutor(max_workers=6) as pool:
        futures = {i: pool.submit(_aclgate, args, work) for i, (args, _) in enumerate(CASES)}
        return {i: future.result() for i, future in futures.items()}


@pytest.mark.parametrize(
    ("index", "says"), [(i, says) for i, (_, says) in enumerate(CASES)],
    ids=[" ".join(args)[:60] for args, _ in CASES],
)  # fmt: skip
def test_a_user_error_is_one_line_and_a_non_zero_exit(
    results: dict[int, subprocess.CompletedProcess[str]], index: int, says: str
) -> None:
    assert_one_clear_line(results[index], says)


def test_every_command_is_covered() -> None:
    covered = {args[0] for args, _ in CASES if not args[0].startswith("-")}
    assert set(cli.COMMANDS) <= covered, set(cli.COMMANDS) - covered


def test_a_port_in_use_is_one_line(work: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _aclgate(
            ["serve", "--upstream", "127.0.0.1:1", "--listen", f"127.0.0.1:{port}"], work
        )
    assert_one_clear_line(result, "cannot start")


def test_acls_list_by_a_principal_without_describe_on_the_cluster(
    work: Path, tansu: Any, proxy_process: Any
) -> None:
    """Before: a traceback ending in ClusterAuthorizationFailedError (kafka-python raises it
    from describe_acls, where --add gets it as an answer)."""
    proxy = proxy_process("--upstream", tansu.bootstrap, "--listen", "127.0.0.1:0",
                          "--acl-file", str(work / "acls.json"))  # fmt: skip
    for action in (["--list"], ["--add", "--allow-principal", "User:x", "--topic", "t"]):
        result = _aclgate(["acls", "--bootstrap-server", proxy.bootstrap, *action], work)
        assert_one_clear_line(result, "CLUSTER_AUTHORIZATION_FAILED (31)")


def test_serve_with_an_upstream_that_is_no_kafka_broker(proxy_process: Any) -> None:
    """--upstream naming a port where something else listens (it closes on ApiVersions): the
    cluster is unreachable, said in one line. Before: a traceback ending in
    IncompleteReadError, and the proxy exited."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        stop = threading.Event()

        def close_each() -> None:
            other.settimeout(0.1)
            while not stop.is_set():
                try:
                    other.accept()[0].close()
                except TimeoutError:
                    pass

        closer = threading.Thread(target=close_each, daemon=True)
        closer.start()
        try:
            upstream = f"127.0.0.1:{other.getsockname()[1]}"
            proxy = proxy_process("--upstream", upstream, "--listen", "127.0.0.1:0")
            wait_until(lambda: "upstream cluster not reachable" in proxy.log, timeout=30,
                       what="the unreachable line")  # fmt: skip
            assert proxy.proc.poll() is None, proxy.log
        finally:
            stop.set()
            closer.join(5)
    assert "Traceback" not in proxy.log
    assert "no Kafka answer to ApiVersions" in proxy.log


def _read_one_line_then_close(
    args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """`aclgate ARGS | head -1`: the reader goes away while aclgate still writes."""
    proc = subprocess.Popen(
        [ACLGATE, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    return proc.wait(60), stderr


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--acl-file", "acls.json", "--queries", "many.jsonl"],
        ["check", "--acl-file", "acls.json", "--queries", "expect-many.jsonl", "--expect"],
        ["acls", "--acl-file", "many.json", "--list"],
        # one write of the whole file (520 KB), cut short by the reader going away
        ["acls", "--acl-file", "many.json", "export"],
        ["users", "list", "--users-file", "many-users.json"],
    ],
    ids=["check", "check-expect", "acls-list", "acls-export", "users-list"],
)
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_a_closed_output_pipe_ends_quietly(work: Path, args: list[str], unbuffered: bool) -> None:
    """Like a Unix tool killed by SIGPIPE (`yes | head -1`): no message, status 141. Before:
    a BrokenPipeError traceback (check), "Error while executing ACL command: [Errno 32]
    Broken pipe" (acls); under PYTHONUNBUFFERED (containers, CI) `acls export` lost what a
    short write left over and exited 0."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    status, stderr = _read_one_line_then_close(args, work, env)
    assert (status, stderr) == (CLOSED_PIPE_STATUS, "")


# ------------------------------------------------------------ a bug of ours keeps its traceback


@pytest.fixture
def fake_command(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """A command `fake` whose run() raises what the test puts in `module.error`."""
    module = types.ModuleType("tests_cli_fake_command")

    def configure(parser: Any) -> None:
        parser.add_argument("--name")

    def run(args: Any) -> int:
        raise module.error

    module.configure = configure  # type: ignore[attr-defined]
    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(cli.COMMANDS, "fake", (module.__name__, "a test's command"))
    yield module


@pytest.mark.parametrize(
    "error",
    [TypeError("a bug"), KeyError("k"), AssertionError(), OSError(9, "Bad file descriptor"),
     BrokenPipeError(32, "Broken pipe")],  # a socket of ours, not stdout
    ids=["TypeError", "KeyError", "AssertionError", "OSError-no-file", "BrokenPipe-not-stdout"],
)  # fmt: skip
def test_a_bug_of_ours_is_not_hidden(fake_command: types.ModuleType, error: BaseException) -> None:
    fake_command.error = error  # type: ignore[attr-defined]
    with pytest.raises(type(error)):
        cli.main(["fake"])


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (FileNotFoundError(2, "No such file or directory", "x.json"),
         "aclgate fake: error: x.json: No such file or directory"),
        (ConnectionRefusedError(111, "Connection refused"),
         "aclgate fake: error: [Errno 111] Connection refused"),
    ],
)  # fmt: skip
def test_a_users_error_is_one_line(
    fake_command: types.ModuleType,
    error: BaseException,
    line: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_command.error = error  # type: ignore[attr-defined]
    assert cli.main(["fake"]) == 1
    assert capsys.readouterr().err == line + "\n"
    monkeypatch.setenv("ACLGATE_TRACEBACK", "1")  # and the traceback when asked for
    with pytest.raises(type(error)):
        cli.main(["fake"])


def test_kafka_errors_are_named_as_kafka_names_them(
    fake_command: types.ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    from kafka.errors import ClusterAuthorizationFailedError

    fake_command.error = ClusterAuthorizationFailedError()  # type: ignore[attr-defined]
    assert cli.main(["fake"]) == 1
    assert capsys.readouterr().err.startswith(
        "aclgate fake: error: CLUSTER_AUTHORIZATION_FAILED (31): "
    )


def test_an_unknown_option_is_caught_before_argparse_misreads_it(
    fake_command: types.ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["fake", "--nmae", "x"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "aclgate fake: error: unrecognized option --nmae; did you mean --name? "
        "(see `aclgate fake --help`)\n"
    )
    fake_command.error = ValueError("reached run")  # type: ignore[attr-defined]
    with pytest.raises(ValueError):  # an abbreviation is fine
        cli.main(["fake", "--na", "x"])
