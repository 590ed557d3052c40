"""Pin kio's ranges: an upgrade that changes what the proxy parses must fail loudly here."""

from kio.schema.index import schema_name_map

from aclgate.protocol.routing import BLOCKED, allowed_versions
from aclgate.protocol.versions import (
    API_NAMES,
    KIO_RANGES,
    REQUEST_FLEXIBLE,
    first_flexible_version,
)

# api_key: (name, min, max, first flexible) for the APIs the proxy inspects or rewrites
PINNED = {
    0: ("produce", 3, 13, 9),
    1: ("fetch", 4, 18, 12),
    2: ("list_offsets", 1, 11, 6),
    3: ("metadata", 0, 13, 9),
    8: ("offset_commit", 2, 10, 8),
    9: ("offset_fetch", 1, 10, 6),
    10: ("find_coordinator", 0, 6, 3),
    11: ("join_group", 0, 9, 6),
    12: ("heartbeat", 0, 4, 4),
    13: ("leave_group", 0, 5, 4),
    14: ("sync_group", 0, 5, 4),
    15: ("describe_groups", 0, 6, 5),
    16: ("list_groups", 0, 5, 3),
    17: ("sasl_handshake", 0, 1, None),
    18: ("api_versions", 0, 4, 3),
    19: ("create_topics", 2, 7, 5),
    20: ("delete_topics", 1, 6, 4),
    22: ("init_producer_id", 0, 6, 2),
    36: ("sasl_authenticate", 0, 2, 2),
    60: ("describe_cluster", 0, 2, 0),
}


def test_kio_ranges_are_the_ones_the_proxy_was_built_for():
    for key, (name, lo, hi, flex) in PINNED.items():
        assert (min(schema_name_map[name]), max(schema_name_map[name])) == (lo, hi), name
        assert KIO_RANGES[key] == (lo, hi)
        assert first_flexible_version(key) == flex, name


def test_tables_cover_every_version():
    assert len(KIO_RANGES) == 89
    for key, (lo, hi) in KIO_RANGES.items():
        for v in range(lo, hi + 1):
            assert (key, v) in REQUEST_FLEXIBLE
    assert API_NAMES[0] == "Produce" and API_NAMES[10] == "FindCoordinator"


def test_allowed_versions_exclude_blocked_and_apply_caps():
    allowed = allowed_versions({1: 12, 0: 9})
    assert not set(allowed) & set(BLOCKED)
    assert allowed[1] == (4, 12) and allowed[0] == (3, 9)
    assert 38 not in allowed and 17 not in allowed  # delegation tokens and SASL are never forwarded


def test_api_key_names_are_kafkas():
    """protocol.apikeys.ApiKey names every API kio knows, as Kafka's schemas name it."""
    import re

    from aclgate.protocol.apikeys import ApiKey
    from aclgate.protocol.versions import API_NAMES

    def snake(name: str) -> str:
        name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
        return re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name).upper()

    assert {k.value: k.name for k in ApiKey} == {k: snake(n) for k, n in API_NAMES.items()}


def test_every_table_row_declares_versions_kio_parses():
    from aclgate.protocol.enforce.table import TABLE
    from aclgate.protocol.versions import KIO_RANGES

    for key, row in TABLE.items():
        lo, hi = row.versions
        assert KIO_RANGES[key][0] <= lo <= hi <= KIO_RANGES[key][1], (key.name, row.versions)
