"""Entry point for `spark-submit`: the same jobs, with spark-submit owning master and JVM.

    spark-submit --master spark://host:7077 pipeline/submit.py report --audit /logs --out /tmp/r
    spark-submit --master yarn pipeline/submit.py whatif --audit hdfs:///audit \\
        --candidate-acl-file new.json --out /tmp/w

The sub-commands and options are those of `aclgate report|advise|whatif|audit-sample`;
only `pipeline/` and `authz/` need to be importable (this file puts the repository on the
path when run from a checkout), not the proxy's own dependencies.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    # Run as a script, Python puts pipeline/ itself first on the path, where its modules
    # would shadow top-level names; the repository root is what must be importable.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path.insert(0, os.path.dirname(here))

import argparse
import importlib

JOBS = {
    "report": "aclgate.pipeline.cli.report",
    "advise": "aclgate.pipeline.cli.advise",
    "whatif": "aclgate.pipeline.cli.whatif",
    "stream": "aclgate.pipeline.cli.stream",
    "audit-sample": "aclgate.pipeline.cli.sample",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in JOBS:
        print(f"usage: spark-submit pipeline/submit.py {{{','.join(JOBS)}}} [options]")
        return 2
    module = importlib.import_module(JOBS[argv[0]])
    parser = argparse.ArgumentParser(
        prog=f"spark-submit pipeline/submit.py {argv[0]}",
        description=(module.__doc__ or "").strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.configure(parser)
    return int(module.run(parser.parse_args(argv[1:])) or 0)


if __name__ == "__main__":
    sys.exit(main())
