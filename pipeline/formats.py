"""Audit lines of the three formats of `aclgate serve --audit-format` (docs/audit.md, "Formats")
as the one event of docs/audit.md, detected per line: a file or a topic may mix them.

  aclgate      the event itself (pipeline/schema.py)
  cloudevents  a CloudEvents 1.0 envelope (`specversion`): the event is its `data`
  ocsf         an OCSF API Activity event (`class_uid`): mapped back field by field, the way
               proxy/audit/formats.py maps the event to it

`parse_line` parses each line once. A line aclgate wrote in its own format begins with
`{"schema_version"` (proxy/audit/log.py writes that field first): it is parsed with the event's
schema alone, exactly as before the other formats existed, so lines of the default format cost
the jobs what they did. Any other line (another format, or an aclgate event with its fields in
another order) is parsed with `wire_schema()`: the event's fields plus those of the envelope
and of OCSF that hold them, then `normalized()` builds the event from where the line's format
keeps each field. OCSF's `api` is an object where the event's is a string: the wire schema
reads it as a string, which Spark fills with the object's JSON text for an OCSF line, and the
operation and version are taken from that text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aclgate.pipeline.schema import CORRUPT_COLUMN, acl_struct_type, audit_schema

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import StructType

#: OCSF action_id -> the event's decision
OCSF_DECISIONS = {1: "ALLOWED", 2: "DENIED"}


def _ocsf_fields() -> list:
    """The fields of an OCSF line that hold the event's (besides `count` and `api`, which the
    event has too)."""
    from pyspark.sql.types import (
        ArrayType,
        BooleanType,
        DataType,
        IntegerType,
        StringType,
        StructField,
        StructType,
    )

    def struct(*fields: tuple[str, DataType]) -> StructType:
        return StructType([StructField(name, kind) for name, kind in fields])

    string = StringType()
    return [
        StructField("class_uid", IntegerType()),
        StructField("time_dt", string),
        StructField("start_time_dt", string),
        StructField("action_id", IntegerType()),
        StructField("metadata", struct(("log_version", string))),
        StructField(
            "actor",
            struct(
                ("user", struct(("uid", string), ("groups", ArrayType(struct(("uid", string))))))
            ),
        ),
        StructField("src_endpoint", struct(("ip", string))),
        StructField("dst_endpoint", struct(("name", string))),
        StructField("resources", ArrayType(struct(("type", string), ("name", string)))),
        StructField(
            "unmapped",
            struct(
                ("event", string),
                ("listener", string),
                ("client_id", string),
                ("api_key", IntegerType()),
                ("operation", string),
                ("enforced", BooleanType()),
                ("rule", string),
                ("acl", acl_struct_type()),
            ),
        ),
    ]


def wire_schema(with_corrupt_column: bool = False) -> StructType:
    """What a line of any of the three formats is parsed with (module docstring)."""
    from pyspark.sql.types import StringType, StructField, StructType

    fields = [
        *audit_schema().fields,
        StructField("specversion", StringType()),
        StructField("data", audit_schema()),
        *_ocsf_fields(),
    ]
    if with_corrupt_column:
        fields.append(StructField(CORRUPT_COLUMN, StringType()))
    return StructType(fields)


def _ocsf_event(j: Column) -> dict[str, Column]:
    """The event's fields of an OCSF line (proxy/audit/formats.py's `ocsf`, backwards)."""
    from pyspark.sql import functions as F

    unmapped = j["unmapped"]
    resource = j["resources"].getItem(0)
    decision = F.when(j["action_id"] == 1, F.lit(OCSF_DECISIONS[1])).when(
        j["action_id"] == 2, F.lit(OCSF_DECISIONS[2])
    )
    return {
        "schema_version": j["metadata"]["log_version"].cast("int"),
        "event": unmapped["event"],
        "ts": j["time_dt"],
        "ts_first": j["start_time_dt"],
        "count": j["count"],
        "proxy": j["dst_endpoint"]["name"],
        "listener": unmapped["listener"],
        "principal": j["actor"]["user"]["uid"],
        "groups": j["actor"]["user"]["groups"]["uid"],  # each group's uid
        "host": j["src_endpoint"]["ip"],
        "client_id": unmapped["client_id"],
        "api": F.get_json_object(j["api"], "$.operation"),
        "api_key": unmapped["api_key"],
        "api_version": F.get_json_object(j["api"], "$.version").cast("int"),
        "operation": unmapped["operation"],
        "resource_type": resource["type"],
        "resource_name": resource["name"],
        "decision": decision,
        "enforced": unmapped["enforced"],
        "rule": unmapped["rule"],
        "acl": unmapped["acl"],
    }


def normalized(j: Column) -> Column:
    """A parsed line `j` (of wire_schema(), with the corrupt column) as the audit struct
    (audit_schema(), with the corrupt column) whatever its format: the `data` of a CloudEvent,
    an OCSF event mapped back, or the aclgate event's own fields."""
    from pyspark.sql import functions as F

    names = [f.name for f in audit_schema().fields]
    corrupt = j[CORRUPT_COLUMN].alias(CORRUPT_COLUMN)

    def struct(fields: dict[str, Column] | Column) -> Column:
        return F.struct(*[fields[n].alias(n) for n in names], corrupt)

    return (
        F.when(j["specversion"].isNotNull(), struct(j["data"]))
        .when(j["class_uid"].isNotNull(), struct(_ocsf_event(j)))
        .otherwise(struct(j))
    )


#: how a line aclgate writes in its own format begins (the fast path of `parse_line`)
ACLGATE_PREFIX = '{"schema_version"'
_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}


def parse_line(text: Column) -> Column:
    """One JSON line of any format to the audit struct (audit_schema(), with the corrupt column:
    a line that is not JSON of the schema lands there)."""
    from pyspark.sql import functions as F

    aclgate = F.from_json(text, audit_schema(with_corrupt_column=True), _OPTIONS)
    wire = F.from_json(text, wire_schema(with_corrupt_column=True), _OPTIONS)
    # The wire struct is bound once, as the lambda's argument: written out inline, the parse
    # would be repeated for every field of the mapping where Spark shares no subexpression (the
    # Generate the stream parses in: 16 times the CPU). The aclgate path keeps that format's
    # lines at their cost of before; through the general path they would cost 27% more (the
    # events query of pipeline/stream.py on 400,000 lines of `aclgate audit-sample`, JVM CPU).
    other = F.transform(F.array(wire), normalized).getItem(0)
    return F.when(text.startswith(ACLGATE_PREFIX), aclgate).otherwise(other)
