"""Run Apache Kafka's own command-line tools from tests/kafka/lib with `java -cp`.

Every call returns a `ToolResult` (a named tuple: returncode, stdout, stderr) and never
raises on a non-zero exit; it raises `subprocess.TimeoutExpired` only if the tool outlives
`timeout`. Tool logging goes to stderr at WARN (log4j2-tools.properties), so stdout holds
just the tool's output.

    from tests.kafka import tools

    rc, out, err = tools.kafka_topics(kafka.bootstrap, "--list")
    tools.console_produce(kafka.bootstrap, "t", ["a", "b"])
    tools.console_consume(kafka.bootstrap, "t", max_messages=2)
    tools.kafka_acls(lst.bootstrap, "--list", config=lst.java_properties(user="admin"))
    tools.producer_perf_test(kafka.bootstrap, "t", num_records=500)
    tools.run_tool("kafka-consumer-groups", "--bootstrap-server", b, "--list")

`config=` takes client properties (a dict, e.g. `Listener.java_properties(user=...)`, or a
path to a .properties file) and passes them as `--command-config`, which every tool here
accepts in Kafka 4.x. Any bootstrap address works, including the proxy's.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from tests.kafka.cluster import (
    TOOL_JVM_OPTS,
    TOOLS_LOG4J,
    java_command,
    kafka_major,
    write_properties,
)

# Main class behind each bin/*.sh script of the pinned release (checked with `unzip -l`).
TOOLS: Mapping[str, str] = {
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-storage": "kafka.tools.StorageTool",
}
#: where Kafka 3.x still had a tool in the broker's Scala code (moved to kafka-tools in 4.0)
TOOLS_BY_MAJOR: Mapping[int, Mapping[str, str]] = {
    3: {
        "kafka-acls": "kafka.admin.AclCommand",
        "kafka-console-producer": "kafka.tools.ConsoleProducer",
        "kafka-broker-api-versions": "kafka.admin.BrokerApiVersionsCommand",
    },
}


#: option names Kafka 4.x gave the console tools (KIP-1147) and their 3.x spelling
OPTIONS_BY_MAJOR: Mapping[int, Mapping[str, Mapping[str, str]]] = {
    3: {
        "kafka-console-producer": {
            "--reader-property": "--property",
            "--command-property": "--producer-property",
            "--command-config": "--producer.config",
        },
        "kafka-console-consumer": {
            "--formatter-property": "--property",
            "--command-property": "--consumer-property",
            "--command-config": "--consumer.config",
        },
        "kafka-producer-perf-test": {"--command-config": "--producer.config"},
    },
}


def tool_class(tool: str) -> str:
    """The main class of a tool script name for the suite's Kafka version."""
    return {**TOOLS, **TOOLS_BY_MAJOR.get(kafka_major(), {})}.get(tool, tool)


def _spelled(tool: str, argv: Sequence[str]) -> list[str]:
    """`argv` with the option names of the suite's Kafka version."""
    names = OPTIONS_BY_MAJOR.get(kafka_major(), {}).get(tool, {})
    return [names.get(a, a) for a in argv]


class ToolResult(NamedTuple):
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def check(self) -> ToolResult:
        """Raise AssertionError with both streams when the tool failed."""
        if self.returncode != 0:
            raise AssertionError(
                f"tool exited {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"
            )
        return self


def run_tool(
    tool: str,
    *args: str,
    config: Mapping[str, str] | str | Path | None = None,
    config_flag: str = "--command-config",
    input: str | None = None,
    timeout: float = 60.0,
    jvm_opts: Sequence[str] = TOOL_JVM_OPTS,
) -> ToolResult:
    """Run a tool by script name (`kafka-topics`) or by fully qualified main class."""
    main = tool_class(tool)
    with tempfile.TemporaryDirectory(prefix="kafka-tool-") as tmp:
        argv = list(args)
        if config is not None:
            if isinstance(config, Mapping):
                config = write_properties(Path(tmp) / "client.properties", config)
            argv += [config_flag, str(config)]
        argv = _spelled(tool, argv)
        env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_OPTS", "JAVA_TOOL_OPTIONS")}
        cmd = java_command(
            main, *argv, jvm_opts=(*jvm_opts, f"-Dlog4j2.configurationFile={TOOLS_LOG4J}")
        )
        proc = subprocess.run(
            cmd,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=tmp,
        )
    return ToolResult(proc.returncode, proc.stdout, proc.stderr)


# ----------------------------------------------------------------------------- shortcuts


def kafka_topics(bootstrap: str, *args: str, **kw) -> ToolResult:
    """kafka-topics --bootstrap-server BOOTSTRAP ARGS..."""
    return run_tool("kafka-topics", "--bootstrap-server", bootstrap, *args, **kw)


def kafka_acls(bootstrap: str, *args: str, **kw) -> ToolResult:
    """kafka-acls --bootstrap-server BOOTSTRAP ARGS... (e.g. "--list", or "--add", ...)."""
    return run_tool("kafka-acls", "--bootstrap-server", bootstrap, *args, **kw)


def consumer_groups(bootstrap: str, *args: str, **kw) -> ToolResult:
    """kafka-consumer-groups --bootstrap-server BOOTSTRAP ARGS..."""
    return run_tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, *args, **kw)


def console_produce(
    bootstrap: str,
    topic: str,
    lines: Iterable[str],
    *,
    key_separator: str | None = None,
    properties: Mapping[str, str] | None = None,
    **kw,
) -> ToolResult:
    """Send one record per line with kafka-console-producer (acks=all, waits for delivery).

    With key_separator, each line is KEY<sep>VALUE.
    """
    args = ["--bootstrap-server", bootstrap, "--topic", topic]
    if key_separator is not None:
        args += ["--reader-property", "parse.key=true"]
        args += ["--reader-property", f"key.separator={key_separator}"]
    for k, v in (properties or {}).items():
        args += ["--command-property", f"{k}={v}"]
    text = "".join(f"{line}\n" for line in lines)
    return run_tool("kafka-console-producer", *args, input=text, **kw)


def console_consume(
    bootstrap: str,
    topic: str,
    *,
    max_messages: int,
    from_beginning: bool = True,
    group: str | None = None,
    timeout_ms: int = 20000,
    print_key: bool = False,
    properties: Mapping[str, str] | None = None,
    **kw,
) -> ToolResult:
    """Read up to max_messages records with kafka-console-consumer; one value per stdout line.

    The tool exits after max_messages records, or with an error after timeout_ms without one.
    """
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--max-messages", str(max_messages)]
    args += ["--timeout-ms", str(timeout_ms)]
    if from_beginning:
        args.append("--from-beginning")
    if group:
        args += ["--group", group]
    if print_key:
        args += ["--formatter-property", "print.key=true"]
    for k, v in (properties or {}).items():
        args += ["--command-property", f"{k}={v}"]
    kw.setdefault("timeout", timeout_ms / 1000 + 60)
    return run_tool("kafka-console-consumer", *args, **kw)


def producer_perf_test(
    bootstrap: str,
    topic: str,
    *,
    num_records: int = 1000,
    record_size: int = 100,
    throughput: int = -1,
    properties: Mapping[str, str] | None = None,
    **kw,
) -> ToolResult:
    """kafka-producer-perf-test; the last stdout line is the summary
    ('N records sent, X records/sec (Y MB/sec), Z ms avg latency, ...')."""
    args = [
        "--topic",
        topic,
        "--num-records",
        str(num_records),
        "--record-size",
        str(record_size),
        "--throughput",
        str(throughput),
    ]
    if kafka_major() < 4:  # one --producer-props list holds the bootstrap and the properties
        props = {"bootstrap.servers": bootstrap, **(properties or {})}
        args += ["--producer-props", *(f"{k}={v}" for k, v in props.items())]
        return run_tool("kafka-producer-perf-test", *args, **kw)
    args += ["--bootstrap-server", bootstrap]
    for k, v in (properties or {}).items():
        args += ["--command-property", f"{k}={v}"]
    return run_tool("kafka-producer-perf-test", *args, **kw)
