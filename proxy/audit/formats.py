"""The audit line formats of `--audit-format` (docs/audit.md, "Formats"), for the file and the
topic alike: `aclgate` (the event of proxy/audit/log.py as it is, the default), `cloudevents`
(CloudEvents 1.0, JSON structured mode, the event as `data`) and `ocsf` (OCSF API Activity).

`AuditLog` builds each event once and, for the last two, converts it once per written line
(not per decision: an aggregated line is converted once, whatever its count) with the function
`formatter()` returns. The conversions use only the event's own fields, so the Spark jobs can
map a line of any format back to the event (pipeline/reader.py).
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from aclgate import __version__

FORMATS = ("aclgate", "cloudevents", "ocsf")

# ---------------------------------------------------------------------- CloudEvents 1.0

CLOUDEVENTS_SPEC_VERSION = "1.0"
#: the `type` of a decision line and of an `acl_change` line
DECISION_TYPE = "io.aclgate.authorization.decision"
ACL_CHANGE_TYPE = "io.aclgate.acl.change"
#: the Kafka protocol binding's structured mode: the content-type header of each record
CLOUDEVENTS_CONTENT_TYPE = "application/cloudevents+json; charset=UTF-8"
#: how a CloudEvents line begins (`cloudevent` puts `specversion` first): the topic sink tells
#: a CloudEvents line (from the spool too, whatever the format is now) by it
CLOUDEVENTS_PREFIX = '{"specversion":'
#: a proxy name that is a URI authority as it is (host, host:port)
_AUTHORITY = re.compile(r"[A-Za-z0-9._~-]+(:[0-9]+)?")


def cloudevents_source(proxy: str) -> str:
    """`aclgate://<proxy name>`, the name percent-encoded where it is not a URI authority
    (an IPv6 `::1:9092`, spaces)."""
    return "aclgate://" + (proxy if _AUTHORITY.fullmatch(proxy) else quote(proxy, safe=""))


def cloudevent(event: dict[str, Any], source: str, event_id: str) -> dict[str, Any]:
    """The event as a CloudEvent: `data` is the event itself; `subject` the decision's resource
    (`TOPIC:orders`; none for an `acl_change`)."""
    change = event.get("event") == "acl_change"
    out: dict[str, Any] = {
        "specversion": CLOUDEVENTS_SPEC_VERSION,
        "id": event_id,
        "source": source,
        "type": ACL_CHANGE_TYPE if change else DECISION_TYPE,
        "time": event["ts"],
    }
    if not change:
        out["subject"] = f"{event['resource_type']}:{event['resource_name']}"
    out["datacontenttype"] = "application/json"
    out["data"] = event
    return out


# ---------------------------------------------------------------------- OCSF

#: the OCSF version the lines follow (validated against its JSON schema: tests/data/ocsf/)
OCSF_VERSION = "1.8.0"
#: the Application Activity category's API Activity class
OCSF_CATEGORY_UID, OCSF_CATEGORY = 6, "Application Activity"
OCSF_CLASS_UID, OCSF_CLASS = 6003, "API Activity"
_ACTIVITY_NAMES = {1: "Create", 2: "Read", 3: "Update", 4: "Delete", 99: "Other"}
#: the ACL operation checked -> API Activity's activity_id
_ACTIVITY = {
    "CREATE": 1,
    "CREATE_TOKENS": 1,
    "READ": 2,
    "DESCRIBE": 2,
    "DESCRIBE_CONFIGS": 2,
    "DESCRIBE_TOKENS": 2,
    "WRITE": 3,
    "ALTER": 3,
    "ALTER_CONFIGS": 3,
    "IDEMPOTENT_WRITE": 3,
    "DELETE": 4,
}
_CHANGE_ACTIVITY = {"CreateAcls": 1, "DeleteAcls": 4}
_SEVERITY = {1: "Informational", 3: "Medium"}
#: metadata.product: the version is the writing aclgate's (`aclgate --version`)
_PRODUCT = {"name": "aclgate", "vendor_name": "aclgate", "version": __version__}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MILLISECOND = dt.timedelta(milliseconds=1)


def _millis(ts: str) -> int:
    """An event's ISO-8601 UTC time as OCSF's timestamp_t: milliseconds since the epoch."""
    return (dt.datetime.fromisoformat(ts) - _EPOCH) // _MILLISECOND


def _actor(event: dict[str, Any]) -> dict[str, Any]:
    principal: str = event["principal"]
    user: dict[str, Any] = {"uid": principal, "name": principal.partition(":")[2] or principal}
    groups = event.get("groups")
    if groups is not None:
        user["groups"] = [{"uid": g, "name": g.partition(":")[2] or g} for g in groups]
    return {"user": user}


def _api(event: dict[str, Any]) -> dict[str, Any]:
    api: dict[str, Any] = {"operation": event["api"], "service": {"name": "kafka"}}
    if event.get("api_version") is not None:
        api["version"] = str(event["api_version"])
    return api


def _head(activity: int, severity: int, ts: str) -> dict[str, Any]:
    name = _ACTIVITY_NAMES[activity]
    return {
        "category_uid": OCSF_CATEGORY_UID,
        "category_name": OCSF_CATEGORY,
        "class_uid": OCSF_CLASS_UID,
        "class_name": OCSF_CLASS,
        "activity_id": activity,
        "activity_name": name,
        "type_uid": OCSF_CLASS_UID * 100 + activity,
        "type_name": f"{OCSF_CLASS}: {name}",
        "severity_id": severity,
        "severity": _SEVERITY[severity],
        "time": _millis(ts),
        "time_dt": ts,
    }


def _metadata(event: dict[str, Any], profiles: list[str]) -> dict[str, Any]:
    return {
        "version": OCSF_VERSION,
        "product": _PRODUCT,
        "profiles": profiles,
        "log_name": "aclgate audit",
        "log_version": str(event["schema_version"]),
    }


def ocsf(event: dict[str, Any]) -> dict[str, Any]:
    """The event as an OCSF API Activity (6003) event; an `acl_change` as one too."""
    if event.get("event") == "acl_change":
        return _ocsf_acl_change(event)
    allowed = event["decision"] == "ALLOWED"
    enforced = event["enforced"]
    ts, ts_first = event["ts"], event["ts_first"]
    out = _head(_ACTIVITY.get(event["operation"], 99), 1 if allowed else 3, ts)
    out["count"] = event["count"]
    if ts_first is not None:  # an aggregated line: the window its decisions fell in
        out["start_time"] = _millis(ts_first)
        out["start_time_dt"] = ts_first
        out["end_time"] = out["time"]
        out["end_time_dt"] = ts
    resource = f"{event['resource_type']}:{event['resource_name']}"
    out["message"] = (
        f"{event['principal']} {event['decision']} {event['operation']} on {resource} "
        f"({event['api']})" + ("" if enforced or allowed else ", dry-run: not enforced")
    )
    out["status_id"], out["status"] = (1, "Success") if allowed or not enforced else (2, "Failure")
    out["action_id"], out["action"] = (1, "Allowed") if allowed else (2, "Denied")
    out["disposition_id"], out["disposition"] = (
        (1, "Allowed") if allowed else (2, "Blocked") if enforced else (17, "Logged")
    )
    out["metadata"] = _metadata(event, ["datetime", "security_control"])
    out["actor"] = _actor(event)
    out["src_endpoint"] = {"ip": event["host"]}
    out["dst_endpoint"] = {"name": event["proxy"], "svc_name": "kafka"}
    out["api"] = _api(event)
    out["resources"] = [{"type": event["resource_type"], "name": event["resource_name"]}]
    out["unmapped"] = {
        "listener": event["listener"],
        "client_id": event["client_id"],
        "api_key": event["api_key"],
        "operation": event["operation"],
        "enforced": enforced,
        "rule": event["rule"],
        "acl": event["acl"],
    }
    return out


def _ocsf_acl_change(event: dict[str, Any]) -> dict[str, Any]:
    committed = event["result"] == "COMMITTED"
    out = _head(_CHANGE_ACTIVITY.get(event["api"], 99), 3, event["ts"])
    out["count"] = 1
    added, removed = event["added"], event["removed"]
    out["message"] = (
        f"{event['principal']} {event['api']}: {len(added)} ACLs added, {len(removed)} removed "
        f"({event['result']})"
    )
    out["status_id"], out["status"] = (1, "Success") if committed else (2, "Failure")
    if event["error"] is not None:
        out["status_detail"] = event["error"]
    out["metadata"] = _metadata(event, ["datetime"])
    out["actor"] = _actor(event)
    out["src_endpoint"] = {"ip": event["host"]}
    out["dst_endpoint"] = {"name": event["proxy"], "svc_name": "kafka"}
    out["api"] = _api(event)
    resources = dict.fromkeys((b["resource_type"], b["resource_name"]) for b in added + removed)
    out["resources"] = [{"type": t, "name": n} for t, n in resources]
    out["unmapped"] = {
        "event": "acl_change",
        "listener": event["listener"],
        "client_id": event["client_id"],
        "api_key": event["api_key"],
        "store": event["store"],
        "result": event["result"],
        "error": event["error"],
        "added": added,
        "removed": removed,
    }
    return out


# ---------------------------------------------------------------------- choosing one


def formatter(name: str, proxy: str) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """The conversion of format `name` for the audit log of proxy `proxy`; None for `aclgate`
    (the event is written as it is)."""
    if name == "aclgate":
        return None
    if name == "ocsf":
        return ocsf
    if name == "cloudevents":
        source = cloudevents_source(proxy)
        # unique per event: this audit log's own random prefix, then its line number
        prefix = f"{uuid.uuid4()}-"
        numbers = itertools.count(1)
        return lambda event: cloudevent(event, source, f"{prefix}{next(numbers)}")
    raise ValueError(f"unknown audit format {name!r} (one of {', '.join(FORMATS)})")


def principal_of(line: dict[str, Any]) -> Any:
    """The principal (the topic's record key) of an audit line of any format."""
    if "specversion" in line:
        return line["data"]["principal"]
    if "class_uid" in line:
        return line["actor"]["user"]["uid"]
    return line["principal"]
