"""Issue 22, item 5: the Produce, Fetch, Metadata, OffsetFetch and ACL handlers read their
requests through Protocols generated from kio's schema classes (protocol/shapes/), not `Any`.

* requests.py is what the generator makes of the installed kio now (a kio upgrade that drops
  or retypes a field fails here, not in a request);
* the versions each shape covers are the ones the API table serves;
* every kio class of every served version has each field its Protocol names;
* mypy rejects a handler that reads a field the request does not have.
"""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys
from pathlib import Path

import pytest
from kio.serial._introspect import EntityField, EntityTupleField, classify_field

from aclgate.protocol.enforce.table import TABLE
from aclgate.protocol.shapes import generate, requests
from aclgate.protocol.versions import request_class

REPO = Path(__file__).resolve().parents[2]


def test_the_generated_shapes_are_current() -> None:
    assert generate.main(["--check"]) == 0, "run python -m aclgate.protocol.shapes.generate"


def test_a_stale_file_fails_the_check(tmp_path, monkeypatch) -> None:
    stale = tmp_path / "requests.py"
    stale.write_text(
        generate.TARGET.read_text().replace("def acks(self) -> int", "def acks(self) -> str")
    )
    monkeypatch.setattr(generate, "TARGET", stale)
    assert generate.main(["--check"]) == 1


def test_each_shape_covers_the_versions_the_table_serves() -> None:
    for key, shaped in generate.APIS.items():
        low, high = shaped[0][0], shaped[-1][1]
        assert TABLE[key].versions == (low, high), key
        for (_, end, _), (start, _, _) in itertools.pairwise(shaped):
            assert start == end + 1  # no version left out between two shapes


def _members(protocol: type) -> list[str]:
    return [n for n, v in vars(protocol).items() if isinstance(v, property)]


@pytest.mark.parametrize("key", list(generate.APIS))
def test_every_served_version_has_the_fields_its_protocol_names(key) -> None:
    """Walked down from each request class: a field of every entity it holds, at each
    version, is one its Protocol names (or one the Protocol's docstring says is partial)."""
    for low, high, root in generate.APIS[key]:
        for version in range(low, high + 1):
            _conforms(request_class(key, version), getattr(requests, root), version)


def _conforms(cls: type, protocol: type, version: int) -> None:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in _members(protocol):
        assert name in fields, f"{cls.__qualname__} v{version} has no {name}"
    for name, f in fields.items():
        child = getattr(requests, protocol.__name__ + generate._camel(name), None)
        if child is None or name not in _members(protocol):
            continue
        entity = _entity_class(f)
        assert entity is not None, (cls, name)
        _conforms(entity, child, version)


def _entity_class(f: dataclasses.Field) -> type | None:
    """The entity class of a field holding entities (one or an array of them)."""
    shape = classify_field(f)
    if isinstance(shape, EntityTupleField | EntityField):
        return shape.type_
    return None


@pytest.mark.slow
def test_reading_a_field_the_request_lacks_fails_the_type_check(tmp_path) -> None:
    module = tmp_path / "reads.py"
    module.write_text(
        "from aclgate.protocol.shapes.requests import ProduceRequest\n"
        "def acks(request: ProduceRequest) -> int:\n"
        "    return request.acks\n"
        "def wrong(request: ProduceRequest) -> int:\n"
        "    return request.topic_data[0].partition_data[0].no_such_field\n"
    )
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent",
         "--ignore-missing-imports", str(module)],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert checked.returncode != 0
    assert "no_such_field" in checked.stdout and checked.stdout.count("error:") == 1, checked.stdout
