"""Issue 22, item 5: the Produce, Fetch, Metadata, group and ACL handlers read their requests
through Protocols generated from kio's schema classes (protocol/shapes/), not `Any`.

* requests.py is what the generator makes of the installed kio now (a kio upgrade that drops
  or retypes a field fails here, not in a request);
* the versions each shape covers are the ones the API table serves;
* every kio class of every served version has each field its Protocol names;
* mypy rejects a handler that reads a field the request does not have.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from kio.serial._introspect import EntityField, EntityTupleField, classify_field

from aclgate.protocol.enforce.table import TABLE
from aclgate.protocol.shapes import generate, requests
from aclgate.protocol.versions import request_class

REPO = Path(__file__).resolve().parents[2]


GENERATED = REPO / "protocol" / "shapes" / "requests.py"


def test_the_generated_shapes_are_current() -> None:
    assert GENERATED.read_text() == generate.render(), (
        "run python -m aclgate.protocol.shapes.generate > protocol/shapes/requests.py"
    )


def test_the_generator_writes_the_file_to_stdout() -> None:
    made = subprocess.run(
        [sys.executable, "-m", "aclgate.protocol.shapes.generate"],
        capture_output=True, text=True, check=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert made.stdout == GENERATED.read_text()
    assert "def acks(self) -> int" in made.stdout  # a stale file would differ here


def test_each_shape_covers_the_versions_the_table_serves() -> None:
    for key, shaped in generate.APIS.items():
        covered = {v for low, high, _ in shaped for v in range(low, high + 1)}
        low, high = TABLE[key].versions
        assert covered == set(range(low, high + 1)), key  # none left out, none extra
        assert shaped[0][:2] == (low, high) or len(shaped) > 1, key


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
