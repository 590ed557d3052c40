"""The counting the fault tests rely on: a loss or a duplicate must show (no Kafka needed)."""

from __future__ import annotations

from collections import Counter

from tests.faults.harness import tally


def test_nothing_lost_nothing_doubled():
    assert tally({0, 1, 2}, Counter({0: 1, 1: 1, 2: 1})) == (0, 0, 0)


def test_an_acknowledged_number_never_read_is_lost():
    assert tally({0, 1, 2}, Counter({0: 1, 2: 1})) == (1, 0, 0)


def test_every_extra_copy_is_a_duplicate():
    assert tally({0, 1}, Counter({0: 3, 1: 2})) == (0, 3, 0)


def test_a_failed_delivery_that_was_written_is_neither_lost_nor_doubled():
    assert tally({0}, Counter({0: 1, 1: 1})) == (0, 0, 1)
