"""Input listing: a rotated audit file caught mid-compression is read once."""

from aclgate.pipeline.inputs import expand_inputs


def test_plain_and_gzipped_copies_of_one_rotated_file_are_read_once(tmp_path):
    (tmp_path / "audit-20261121T120000Z-000001.jsonl").write_text("{}\n")
    (tmp_path / "audit-20261121T120000Z-000001.jsonl.gz").write_bytes(b"")
    (tmp_path / "audit-20261121T120000Z-000002.jsonl.gz.tmp").write_bytes(b"")
    (tmp_path / "audit.jsonl").write_text("{}\n")
    names = sorted(p.rsplit("/", 1)[1] for p in expand_inputs([str(tmp_path)]).jsonl)
    assert names == ["audit-20261121T120000Z-000001.jsonl.gz", "audit.jsonl"]
