"""The audit topic's spool (proxy/audit/spool.py): bounded, oldest first, delivered lines leave
the disk, a restart resumes where delivery stopped, a line cut short by a crash is removed
with a clear log line, one process per spool."""

from __future__ import annotations

import json
import logging

import pytest

from aclgate.proxy.audit.spool import AuditSpool, SpoolError


def line(i: int, principal: str = "User:alice") -> str:
    return json.dumps({"principal": principal, "i": i}, separators=(",", ":")) + "\n"


def drain(spool: AuditSpool, batch: int = 7) -> list[str]:
    """Read and commit everything, `batch` lines at a time, as the sink's drain does."""
    out: list[str] = []
    while not spool.empty:
        lines = spool.read(batch)
        assert lines, "pending bytes but nothing to read"
        out += [text for text, _ in lines]
        spool.commit(lines[-1][1])
    return out


def test_lines_come_back_oldest_first_across_segments_and_leave_the_disk(tmp_path):
    spool = AuditSpool(tmp_path / "spool", max_bytes=1 << 20, segment_bytes=200)
    written = [line(i) for i in range(50)]
    assert spool.append(written) == 0
    spool.sync()
    assert len(list((tmp_path / "spool").glob("*.jsonl"))) > 3  # rolled into segments
    assert spool.pending_bytes == sum(len(x) for x in written)
    assert drain(spool) == written
    assert spool.empty and spool.size == 0
    assert not list((tmp_path / "spool").glob("*.jsonl"))  # every delivered segment deleted
    # appending after a full drain starts a fresh segment and reads only the new lines
    spool.append([line(99)])
    assert [text for text, _ in spool.read(10)] == [line(99)]
    spool.close()


def test_bounded_lines_past_the_limit_are_refused_and_counted(tmp_path):
    one = len(line(0))
    spool = AuditSpool(tmp_path / "spool", max_bytes=one * 10 + 5, segment_bytes=one * 3)
    assert spool.append([line(i) for i in range(25)]) == 15
    assert spool.size <= spool.max_bytes
    assert drain(spool) == [line(i) for i in range(10)]  # the oldest kept, the newest refused
    assert spool.append([line(i) for i in range(5)]) == 0  # room again once delivered
    spool.close()


def test_only_committed_lines_are_forgotten_a_restart_resends_the_rest(tmp_path):
    spool = AuditSpool(tmp_path / "spool", max_bytes=1 << 20, segment_bytes=300)
    spool.append([line(i) for i in range(30)])
    spool.sync()
    first = spool.read(12)
    spool.commit(first[-1][1])  # 12 delivered
    spool.read(5)  # read (sent), never confirmed: must come again
    spool.close()  # as a crash would leave it: the position says 12

    again = AuditSpool(tmp_path / "spool", max_bytes=1 << 20, segment_bytes=300)
    assert drain(again) == [line(i) for i in range(12, 30)]
    again.close()


def test_a_line_cut_short_by_a_crash_is_removed_and_logged(tmp_path, caplog):
    spool = AuditSpool(tmp_path / "spool", max_bytes=1 << 20)
    spool.append([line(0), line(1)])
    spool.close()
    (segment,) = (tmp_path / "spool").glob("*.jsonl")
    with open(segment, "ab") as f:
        f.write(b'{"principal":"User:al')  # the crash came mid-write
    with caplog.at_level(logging.ERROR, logger="aclgate.audit"):
        again = AuditSpool(tmp_path / "spool", max_bytes=1 << 20)
    assert again.repaired_bytes == len(b'{"principal":"User:al')
    assert any("cut short" in r.getMessage() for r in caplog.records)
    assert drain(again) == [line(0), line(1)]
    again.append([line(2)])  # appends continue on a whole line
    assert drain(again) == [line(2)]
    again.close()


def test_one_process_per_spool(tmp_path):
    spool = AuditSpool(tmp_path / "spool", max_bytes=1 << 20)
    with pytest.raises(SpoolError, match="in use by another process"):
        AuditSpool(tmp_path / "spool", max_bytes=1 << 20)
    spool.close()
    AuditSpool(tmp_path / "spool", max_bytes=1 << 20).close()  # free again


def test_a_damaged_position_resends_everything_rather_than_skip(tmp_path, caplog):
    spool = AuditSpool(tmp_path / "spool", max_bytes=1 << 20)
    spool.append([line(i) for i in range(4)])
    spool.commit(spool.read(2)[-1][1])
    spool.close()
    (tmp_path / "spool" / "position").write_text("{not json")
    with caplog.at_level(logging.ERROR, logger="aclgate.audit"):
        again = AuditSpool(tmp_path / "spool", max_bytes=1 << 20)
    assert "unreadable position" in caplog.text
    assert drain(again) == [line(i) for i in range(4)]  # duplicates, never a loss
    again.close()
