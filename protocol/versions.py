"""What kio can parse: version ranges, header flexibility and display names per API key.

Everything here is computed once at import from kio's own schema index, so an upgrade of kio
that changes a range shows up in one place (and in tests/protocol/test_versions.py).
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map

#: api_key -> (min, max) request version kio can parse. Ranges are contiguous.
KIO_RANGES: dict[int, tuple[int, int]] = {
    key: (min(schema_name_map[name]), max(schema_name_map[name]))
    for key, name in api_key_map.items()
}


@functools.cache
def request_class(api_key: int, api_version: int) -> type[Any]:
    """kio's request entity class; raises KioIndexError for an unknown key or version."""
    return load_request_schema(api_key, api_version)


@functools.cache
def response_class(api_key: int, api_version: int) -> type[Any]:
    return load_response_schema(api_key, api_version)


def response_module(api_key: int, api_version: int) -> ModuleType:
    """The module holding the response's nested entity classes (e.g. MetadataResponseBroker)."""
    return sys.modules[response_class(api_key, api_version).__module__]


def request_module(api_key: int, api_version: int) -> ModuleType:
    return sys.modules[request_class(api_key, api_version).__module__]


#: (api_key, api_version) -> True when the request uses header v2 (flexible versions).
#: A pair missing from this table cannot be framed: its header length is unknown.
REQUEST_FLEXIBLE: dict[tuple[int, int], bool] = {
    (key, v): request_class(key, v).__flexible__
    for key, (lo, hi) in KIO_RANGES.items()
    for v in range(lo, hi + 1)
}

#: api_key -> display name used in logs, metrics and audit events ("Produce", "FindCoordinator").
API_NAMES: dict[int, str] = {
    key: request_class(key, hi).__name__.removesuffix("Request")
    for key, (_, hi) in KIO_RANGES.items()
}


def api_name(api_key: int) -> str:
    """Display name; unknown keys (vendor extensions such as 10000) get a stable placeholder."""
    return API_NAMES.get(api_key) or f"Unknown({api_key})"


def first_flexible_version(api_key: int) -> int | None:
    lo, hi = KIO_RANGES[api_key]
    return next((v for v in range(lo, hi + 1) if REQUEST_FLEXIBLE[(api_key, v)]), None)
