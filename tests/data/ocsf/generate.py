"""Writes api_activity-1.8.0.schema.json beside this file: the JSON Schema (draft 2020-12) of
OCSF 1.8.0's API Activity class (6003) with the `datetime` and `security_control` profiles,
the objects it references embedded under `$defs`. See README.md here.

Run once, by hand, when the OCSF version of proxy/audit/formats.py changes (not by the tests,
which read the file written):

    python -m venv /tmp/ocsf && /tmp/ocsf/bin/pip install ocsf-json-schema==1.2.0
    /tmp/ocsf/bin/python tests/data/ocsf/generate.py
"""

from __future__ import annotations

import json
from pathlib import Path

VERSION = "1.8.0"
CLASS = "api_activity"
PROFILES = ["datetime", "security_control"]
OUT = Path(__file__).resolve().parent / f"{CLASS}-{VERSION}.schema.json"


def main() -> None:
    from ocsf_json_schema import OcsfJsonSchemaEmbedded, get_ocsf_schema

    # the OCSF server's own export of the schema (schema.ocsf.io/1.8.0/export/v2/schema),
    # shipped in the package
    schema = OcsfJsonSchemaEmbedded(get_ocsf_schema(version=VERSION))
    document = schema.get_class_schema(CLASS, PROFILES)
    OUT.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({document['$id']})")


if __name__ == "__main__":
    main()
