"""Equivalence scenarios for share groups (KIP-932) and streams groups (KIP-1071), issue 13.

No Python client speaks these protocols, so every step is one raw request (`Client.raw`), as
the Java KafkaShareConsumer and Kafka Streams send them: heartbeats that join (and leave) a
group, ShareFetch / ShareAcknowledge by topic id, the describe and offsets APIs. User:ANONYMOUS
on both sides, as the ANON family. Topic ids differ between the two clusters; a step asks the
observer for the id of its side's topic (`topic_id`), and ids never appear in outcomes.

Records fetched by a share consumer depend on when the broker's share partition finished
loading, so the fetches here name only topics whose answer does not (denied, unknown); the
Java share consumer through aclgate is tests/kafka/test_share_streams.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from tests.equivalence.harness import Client, Run, Scenario, allow

ANON = "User:ANONYMOUS"
FIND_GROUP = 0
SHARE_HEARTBEAT = 76
UNKNOWN_TOPIC = "00000000-0000-0000-0000-0000000000aa"  # an id no topic has
# the steps with an explained difference (docs/design.md)
SHARE_FETCH_UNKNOWN_ID = "ShareFetch sg-ok: an unknown topic id"
STREAMS_NO_CREATE_STEP = "StreamsGroupHeartbeat st-nc, source in, no CREATE on its changelog"


def group_heartbeat(
    c: Client,
    group: str,
    member: str,
    epoch: int,
    topics: list[str] | None,
    *,
    api_key: int = SHARE_HEARTBEAT,
    drop: Sequence[str] = ("assignment",),  # which partitions, and when: the assignor's business
    **fields: Any,
) -> Any:
    """One ShareGroupHeartbeat v1 (or, with `api_key` 68 and its own `fields`,
    ConsumerGroupHeartbeat v1): joining (epoch 0) with `topics` subscribed by name, or
    leaving (epoch -1)."""
    return c.raw(
        api_key,
        1,
        group_id=c.t(group),
        member_id=member,
        member_epoch=epoch,
        rack_id=None,
        subscribed_topic_names=None if topics is None else [c.t(t) for t in topics],
        coordinator=(FIND_GROUP, group),
        drop=drop,
        **fields,
    )


def _all_share_offsets(c: Client, group: str, **fields: Any) -> Any:
    """DescribeShareGroupOffsets v0 of every topic of `group` (the null form)."""
    return c.raw(
        90,
        0,
        groups=[{"group_id": c.t(group), "topics": None}],
        coordinator=(FIND_GROUP, group),
        unordered=["topics"],
        **fields,
    )


def _describe_one(c: Client, api_key: int, version: int, group: str) -> Any:
    """Share/StreamsGroupDescribe of one group, with Kafka's error message compared."""
    return c.raw(
        api_key,
        version,
        group_ids=[c.t(group)],
        include_authorized_operations=True,
        coordinator=(FIND_GROUP, group),
        keep=["error_message"],  # Kafka words the 29 of a group naming a hidden topic itself
    )


def _share_fetch(c: Client, group: str, member: str, topic_ids: list[str]) -> Any:
    return c.raw(
        78,
        1,
        group_id=c.t(group),
        member_id=member,
        share_session_epoch=0,
        max_wait=100,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=100,
        batch_size=100,
        topics=[
            {"topic_id": t, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}
            for t in topic_ids
        ],
        forgotten_topics_data=[],
        unordered=["responses"],
    )


def _member_id() -> str:
    """A member id as Kafka's clients make one (Uuid.randomUuid().toString(): base64url)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _acknowledge(c: Client, group: str, member: str, topic_ids: list[str]) -> Any:
    batch = {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}
    return c.raw(
        79,
        1,
        group_id=c.t(group),
        member_id=member,
        share_session_epoch=1,
        topics=[
            {"topic_id": t, "partitions": [{"partition_index": 0, "acknowledgement_batches": [batch]}]}
            for t in topic_ids
        ],
        unordered=["responses"],
    )  # fmt: skip


def _both_assigned(out: Any) -> bool:
    return len((out.get("assignment") or {}).get("topic_partitions") or ()) == 2


def _observer_joined(joined: Any, group: str, ready: Callable[[Any], bool] = bool) -> None:
    """Setup: the observer's (super user's) own member joined `group` (and `ready` accepts
    its answer); anything else fails the run rather than let the steps describe a group that
    does not name the hidden topic."""
    if not (isinstance(joined, dict) and joined.get("error_code") == "NONE" and ready(joined)):
        raise RuntimeError(f"the observer's member did not join {group}: {joined}")


def share_groups(r: Run) -> None:
    r.observer.create_topic("q", records=["q0", "q1"])
    r.observer.create_topic("q-hidden", records=["h0"])
    r.observer.create_topic("q-secret")
    q, hidden = r.observer.topic_id("q"), r.observer.topic_id("q-hidden")
    member = _member_id()
    # sg-hid: the observer's member is assigned q and q-secret, which the principal may not
    # DESCRIBE; its share state is initialized for both before the steps describe it
    o = r.observer
    # a member is assigned a topic once its share state is initialized, and learns it from a
    # later heartbeat (one sent again with epoch 0 answers the current one)
    hid = ["q", "q-secret"]
    joined = group_heartbeat(o, "sg-hid", _member_id(), 0, hid, drop=(), until=_both_assigned)
    _observer_joined(joined, "sg-hid", _both_assigned)
    r.step("ShareGroupHeartbeat sg-none (no group ACL), joining", ANON,
           lambda c: group_heartbeat(c, "sg-none", member, 0, ["q"]))  # fmt: skip
    r.step("ShareGroupHeartbeat sg-ok, joining with q and q-secret (no DESCRIBE)", ANON,
           lambda c: group_heartbeat(c, "sg-ok", member, 0, ["q", "q-secret"]))  # fmt: skip
    r.step("ShareGroupHeartbeat sg-ok, joining with q", ANON,
           lambda c: group_heartbeat(c, "sg-ok", member, 0, ["q"]))  # fmt: skip
    r.step(
        "ShareGroupDescribe sg-ok, sg-none, sg-missing",
        ANON,
        lambda c: c.raw(
            77,
            1,
            group_ids=[c.t(g) for g in ("sg-ok", "sg-none", "sg-missing")],
            include_authorized_operations=True,
            coordinator=(FIND_GROUP, "sg-ok"),
            unordered=["groups"],
            keep=["error_message"],  # none for the denied group, as Kafka
        ),
    )
    r.step(
        "ShareGroupDescribe sg-hid (a member assigned q-secret, no DESCRIBE)",
        ANON,
        lambda c: _describe_one(c, 77, 1, "sg-hid"),
    )
    r.step(
        "DescribeShareGroupOffsets v0: sg-hid, all topics (q and the hidden q-secret)",
        ANON,
        lambda c: _all_share_offsets(c, "sg-hid"),
    )
    r.step("ShareFetch sg-none: q", ANON, lambda c: _share_fetch(c, "sg-none", member, [q]))
    r.step("ShareFetch sg-ok: q-hidden (DESCRIBE only)", ANON,
           lambda c: _share_fetch(c, "sg-ok", member, [hidden]))  # fmt: skip
    r.step(SHARE_FETCH_UNKNOWN_ID, ANON,
           lambda c: _share_fetch(c, "sg-ok", member, [UNKNOWN_TOPIC]))  # fmt: skip
    r.step("ShareAcknowledge sg-none: q", ANON, lambda c: _acknowledge(c, "sg-none", member, [q]))
    r.step(
        "ShareAcknowledge sg-ok: q-hidden, unknown id",
        ANON,
        lambda c: _acknowledge(c, "sg-ok", member, [hidden, UNKNOWN_TOPIC]),
    )
    for groups, topics in (("sg-ok", ["q", "q-hidden"]), ("sg-none", ["q"])):
        r.step(
            f"DescribeShareGroupOffsets v0: {groups} for {', '.join(topics)}",
            ANON,
            lambda c, g=groups, ts=topics: c.raw(
                90,
                0,
                groups=[{"group_id": c.t(g), "topics": [
                    {"topic_name": c.t(t), "partitions": [0]} for t in ts]}],
                coordinator=(FIND_GROUP, g),
                unordered=["topics"],
            ),
        )  # fmt: skip
    r.step(
        "DescribeShareGroupOffsets v0: sg-ok, all topics",
        ANON,
        lambda c: _all_share_offsets(
            c,
            "sg-ok",
            # the group's share state is initialized after the assignment, asynchronously
            until=lambda out: bool(out["groups"] and out["groups"][0]["topics"]),
        ),
    )
    r.step("ShareGroupHeartbeat sg-ok, leaving", ANON,
           lambda c: group_heartbeat(c, "sg-ok", member, -1, None))  # fmt: skip
    for api, key, what in (
        ("AlterShareGroupOffsets", 91, [{"partition_index": 0, "start_offset": 1}]),
        ("DeleteShareGroupOffsets", 92, None),
    ):
        for group in ("sg-ok", "sg-none"):
            r.step(
                f"{api} v0: {group}, q and q-hidden",
                ANON,
                lambda c, key=key, what=what, group=group: c.raw(
                    key,
                    0,
                    group_id=c.t(group),
                    topics=[
                        {"topic_name": c.t(t), **({"partitions": what} if what else {})}
                        for t in ("q", "q-hidden")
                    ],
                    coordinator=(FIND_GROUP, group),
                    unordered=["responses"],
                ),
            )


# =========================================================================== streams


def _topology(c: Client, app: str, source: str) -> dict[str, Any]:
    changelog = {
        "name": c.t(f"{app}-store-changelog"),
        "partitions": 0,  # changelogs: as many as the source, the default replication
        "replication_factor": 0,
        "topic_configs": [],
    }
    return {
        "epoch": 0,
        "subtopologies": [
            {
                "subtopology_id": "0",
                "source_topics": [c.t(source)],
                "source_topic_regex": [],
                "state_changelog_topics": [changelog],
                "repartition_sink_topics": [],
                "repartition_source_topics": [],
                "copartition_groups": [],
            }
        ],
    }


def _streams_heartbeat(c: Client, app: str, member: str, epoch: int, source: str | None) -> Any:
    return c.raw(
        88,
        0,
        group_id=c.t(app),
        member_id=member,
        member_epoch=epoch,
        endpoint_information_epoch=0,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=30000,
        topology=None if source is None else _topology(c, app, source),
        active_tasks=None if source is None else [],
        standby_tasks=None if source is None else [],
        warmup_tasks=None if source is None else [],
        process_id=None if source is None else str(uuid.uuid4()),
        user_endpoint=None,
        client_tags=None if source is None else [],
        task_offsets=None,
        task_end_offsets=None,
        shutdown_application=False,
        coordinator=(FIND_GROUP, app),
    )


def streams_groups(r: Run) -> None:
    r.observer.create_topic("in", records=["i0"])
    r.observer.create_topic("in-hidden")
    member = _member_id()
    # st-hid: the observer's member reads in-hidden, which the principal may not DESCRIBE
    o = r.observer
    joined = _streams_heartbeat(o, "st-hid", _member_id(), 0, "in-hidden")
    _observer_joined(joined, "st-hid")
    r.step("StreamsGroupHeartbeat st-none (no group ACL), joining", ANON,
           lambda c: _streams_heartbeat(c, "st-none", member, 0, "in"))  # fmt: skip
    r.step("StreamsGroupHeartbeat st-ok, source in-hidden (no DESCRIBE)", ANON,
           lambda c: _streams_heartbeat(c, "st-ok", member, 0, "in-hidden"))  # fmt: skip
    r.step("StreamsGroupHeartbeat st-ok, source in, CREATE on its changelog", ANON,
           lambda c: _streams_heartbeat(c, "st-ok", member, 0, "in"))  # fmt: skip
    r.step(
        "StreamsGroupDescribe st-ok, st-none, st-missing",
        ANON,
        lambda c: c.raw(
            89,
            0,
            group_ids=[c.t(g) for g in ("st-ok", "st-none", "st-missing")],
            include_authorized_operations=True,
            coordinator=(FIND_GROUP, "st-ok"),
            unordered=["groups"],
            keep=["error_message"],  # none for the denied group, as Kafka
            drop=["process_id", "client_tags", "task_offsets", "active_tasks", "standby_tasks",
                  "warmup_tasks", "topology_epoch", "partitions_by_user_endpoint"],
        ),
    )  # fmt: skip
    r.step(
        "StreamsGroupDescribe st-hid (a topology reading in-hidden, no DESCRIBE)",
        ANON,
        lambda c: _describe_one(c, 89, 0, "st-hid"),
    )
    r.step("StreamsGroupHeartbeat st-ok, leaving", ANON,
           lambda c: _streams_heartbeat(c, "st-ok", member, -1, None))  # fmt: skip
    r.observe("the changelog topic exists", lambda o: o.topic_exists("st-ok-store-changelog", 5))


def streams_no_create(r: Run) -> None:
    """DESCRIBE and READ, but no CREATE on the application's internal topics (deliberate
    difference: docs/design.md, "Streams groups")."""
    r.observer.create_topic("in", records=["i0"])
    member = _member_id()
    r.step(STREAMS_NO_CREATE_STEP, ANON, lambda c: _streams_heartbeat(c, "st-nc", member, 0, "in"))
    r.observe("the changelog topic exists", lambda o: o.topic_exists("st-nc-store-changelog"))


GROUP_SCENARIOS: list[Scenario] = [
    Scenario(
        "share-groups",
        "ShareGroupHeartbeat/Describe, ShareFetch/Acknowledge, Describe/Alter/Delete share "
        "group offsets with the group or topic denied",
        share_groups,
        acls=(
            allow(ANON, "READ", "GROUP", "sg-ok"),
            allow(ANON, "DELETE", "GROUP", "sg-ok"),
            allow(ANON, "DESCRIBE", "GROUP", "sg-none"),
            allow(ANON, "DESCRIBE", "GROUP", "sg-hid"),
            allow(ANON, "READ", "TOPIC", "q"),
            allow(ANON, "DESCRIBE", "TOPIC", "q-hidden"),
        ),
        explained={
            SHARE_FETCH_UNKNOWN_ID: (
                "Kafka 4.3.1 with an authorizer fails the whole ShareFetch with "
                "UNKNOWN_SERVER_ERROR (it authorizes a null topic name); aclgate answers the "
                "partition 100 UNKNOWN_TOPIC_ID, as Kafka does for Fetch (docs/design.md)"
            )
        },
    ),
    Scenario(
        "streams-groups",
        "StreamsGroupHeartbeat with a topology (group, source topic, CREATE on internal "
        "topics), StreamsGroupDescribe",
        streams_groups,
        acls=(
            allow(ANON, "READ", "GROUP", "st-ok"),
            allow(ANON, "DESCRIBE", "GROUP", "st-none"),
            allow(ANON, "DESCRIBE", "GROUP", "st-hid"),
            allow(ANON, "DESCRIBE", "TOPIC", "st-hid-", pattern="PREFIXED"),
            allow(ANON, "READ", "TOPIC", "in"),
            allow(ANON, "CREATE", "TOPIC", "st-ok-", pattern="PREFIXED"),
            allow(ANON, "DESCRIBE", "TOPIC", "st-ok-", pattern="PREFIXED"),
        ),
    ),
    Scenario(
        "streams-groups-no-create",
        "StreamsGroupHeartbeat without CREATE on the internal topics: an explained difference",
        streams_no_create,
        acls=(
            allow(ANON, "READ", "GROUP", "st-nc"),
            allow(ANON, "READ", "TOPIC", "in"),
            allow(ANON, "DESCRIBE", "TOPIC", "st-nc-", pattern="PREFIXED"),
        ),
        explained={
            STREAMS_NO_CREATE_STEP: (
                "Kafka answers NONE with the MISSING_INTERNAL_TOPICS status and creates "
                "nothing; aclgate answers 29, CREATE being required up front (docs/design.md "
                "section Streams groups)"
            )
        },
    ),
]
