"""Atomic writes clean up after writers that died: `aclgate acls` killed with SIGKILL before
its rename left its temporary file behind, every time (issue 15: a 10 MB `.tmp` per kill)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import aclgate.files as fsutil
from aclgate.authz.aclfile import parse_acl_file
from aclgate.files import remove_stale_temporaries, write_atomically
from tests.authz.cli import aclgate

#: run `aclgate acls ARGS` in a process that SIGKILLs itself where the rename would happen
KILLED_BEFORE_RENAME = textwrap.dedent(
    """
    import os, signal, sys
    os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
    from aclgate.proxy.cli import main
    main(["acls", *sys.argv[1:]])
    """
)


def temporaries(directory: Path) -> list[Path]:
    return sorted(directory.glob(".acls.json.*.tmp"))


def test_a_writer_killed_before_its_rename_leaves_nothing_after_the_next_write(tmp_path):
    acl_file = tmp_path / "acls.json"
    many = [f"--topic=t{i}" for i in range(2000)]  # a file of some size, as in the report
    add = ["--acl-file", str(acl_file), "--add", "--allow-principal", "User:a", "--operation"]
    assert aclgate(*add, "Read", *many).returncode == 0
    before = acl_file.read_bytes()
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_BEFORE_RENAME, *add, "Write", *many],
        capture_output=True,
        timeout=60,
    )
    assert killed.returncode == -9
    (left,) = temporaries(tmp_path)
    assert left.stat().st_size > len(before)  # the whole new file, never renamed
    assert acl_file.read_bytes() == before  # the old file, untouched

    result = aclgate(*add, "Describe", "--topic", "t0")
    assert result.returncode == 0, result.stderr
    assert temporaries(tmp_path) == []
    acls = parse_acl_file(acl_file.read_text())
    assert len(acls) == 2001  # the killed write's ACLs never arrived; the next one did


def test_a_temporary_of_a_write_in_progress_is_kept(tmp_path):
    """A living writer holds the flock on its temporary: another writer leaves it alone."""
    acl_file = tmp_path / "acls.json"
    held = tmp_path / ".acls.json.abcd1234.tmp"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys\n"
            f"f = open({str(held)!r}, 'wb')\n"
            "fcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        write_atomically(acl_file, b"{}", 0o644)
        assert held.exists()
    finally:
        holder.communicate("", timeout=10)
    write_atomically(acl_file, b"{}", 0o644)  # its writer is gone now
    assert not held.exists()


def test_only_temporaries_of_this_file_by_our_writer_are_removed(tmp_path):
    acl_file = tmp_path / "acls.json"
    ours = tmp_path / ".acls.json.k3_9zq0a.tmp"
    others = [
        ".acls.json.k3_9zq0a.tmp.bak",
        ".acls.json.K3_9ZQ0A.tmp",
        ".acls.json.toolongname.tmp",
        ".other.json.k3_9zq0a.tmp",
        "acls.json.k3_9zq0a.tmp",
        "acls.json.lock",
    ]
    for name in [ours.name, *others]:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / ".acls.json.dir00000.tmp").mkdir()
    outside = tmp_path / "elsewhere.txt"
    outside.write_bytes(b"keep")
    (tmp_path / ".acls.json.link0000.tmp").symlink_to(outside)
    assert remove_stale_temporaries(acl_file) == [ours.name]
    assert not ours.exists()
    for name in [*others, ".acls.json.dir00000.tmp", ".acls.json.link0000.tmp"]:
        assert os.path.lexists(tmp_path / name), name
    assert outside.read_bytes() == b"keep"


def test_a_temporary_removed_before_its_writer_locked_it_is_replaced(tmp_path, monkeypatch):
    """A clean-up can see a brand-new temporary before its writer has locked it: the writer
    notices and takes another name, and the write still succeeds."""
    real = fsutil.tempfile.mkstemp
    calls = []

    def mkstemp(**kwargs):
        fd, name = real(**kwargs)
        calls.append(name)
        if len(calls) == 1:
            assert remove_stale_temporaries(tmp_path / "acls.json") == [Path(name).name]
        return fd, name

    monkeypatch.setattr(fsutil.tempfile, "mkstemp", mkstemp)
    write_atomically(tmp_path / "acls.json", b'{"version": 1, "acls": []}', 0o644)
    assert len(calls) == 2
    assert (tmp_path / "acls.json").read_bytes() == b'{"version": 1, "acls": []}'
    assert temporaries(tmp_path) == []
