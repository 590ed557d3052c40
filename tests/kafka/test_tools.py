"""Kafka's own Java command-line tools, run from the same jars by tests/kafka/tools.py."""

from __future__ import annotations

import re

import pytest

from tests.kafka import tools

pytestmark = pytest.mark.kafka


def test_topics_create_and_list(kafka_single, kafka_topic_name):
    b = kafka_single.bootstrap
    tools.kafka_topics(b, "--create", "--topic", kafka_topic_name, "--partitions", "2").check()
    listed = tools.kafka_topics(b, "--list").check()
    assert kafka_topic_name in listed.stdout.split()


def test_console_producer_and_consumer_round_trip(kafka_single, kafka_topic_name):
    b = kafka_single.bootstrap
    lines = [f"k{i}:value-{i}" for i in range(5)]
    tools.console_produce(b, kafka_topic_name, lines, key_separator=":").check()
    group = "g-" + kafka_topic_name
    out = tools.console_consume(
        b, kafka_topic_name, max_messages=5, group=group, print_key=True
    ).check()
    assert out.stdout.splitlines() == [f"k{i}\tvalue-{i}" for i in range(5)]
    # the consumer committed as `group`: kafka-consumer-groups shows offset 5, lag 0
    desc = tools.consumer_groups(b, "--describe", "--group", group).check()
    rows = [line.split() for line in desc.stdout.splitlines() if kafka_topic_name in line]
    assert [r[:6] for r in rows] == [[group, kafka_topic_name, "0", "5", "5", "0"]], desc.stdout


def test_producer_perf_test(kafka_single, kafka_topic_name):
    res = tools.producer_perf_test(
        kafka_single.bootstrap, kafka_topic_name, num_records=300, record_size=100
    ).check()
    summary = res.stdout.strip().splitlines()[-1]
    assert re.match(r"300 records sent, ", summary), res.stdout


def test_acls_add_and_list_with_command_config(kafka_authz, kafka_acls, kafka_topic_name):
    # through the SASL listener as the super user: --command-config carries the JAAS login
    lst = kafka_authz.listener("SASL_PLAINTEXT")
    props = lst.java_properties(user="admin", mechanism="PLAIN")
    assert tools.kafka_acls(lst.bootstrap, "--list", config=props).check().stdout == ""
    kafka_acls.add("bob", "WRITE", "TOPIC", kafka_topic_name)
    out = tools.kafka_acls(lst.bootstrap, "--list", config=props).check().stdout
    assert f"name={kafka_topic_name}, patternType=LITERAL" in out
    assert "(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW)" in out


def test_java_client_over_sasl_ssl(kafka_secure):
    lst = kafka_secure.listener("SASL_SSL")
    res = tools.kafka_topics(
        lst.bootstrap, "--list", config=lst.java_properties(user="alice", mechanism="SCRAM-SHA-512")
    )
    res.check()
    wrong = tools.kafka_topics(
        lst.bootstrap,
        "--list",
        config=lst.java_properties(user="alice", mechanism="SCRAM-SHA-512", password="nope"),
    )
    assert not wrong.ok and "Authentication failed" in wrong.stderr + wrong.stdout


def test_unknown_tool_fails_cleanly():
    tools_res = tools.run_tool("org.example.NoSuchTool", timeout=30)
    assert tools_res.returncode != 0 and "NoSuchTool" in tools_res.stderr
