"""Fault tests: idempotent producers through aclgate while brokers and the proxy fail.

See tests/faults/harness.py for the scenario and docs/kafka.md ("Fault tests").
"""
