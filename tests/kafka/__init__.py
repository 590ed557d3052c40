"""Real Apache Kafka for the test suite: jars from Maven Central, KRaft clusters, Java tools.

* `tests.kafka.cluster` - `KafkaCluster`: start 1 or 3 KRaft nodes with PLAINTEXT, SASL, SSL
  listeners and an optional StandardAuthorizer.
* `tests.kafka.tools` - run Kafka's own command-line tools from the same jars.
* `tests.kafka.local` - `python -m tests.kafka.local up|down|status` for manual use.
* `tests/fixtures/kafka.py` - the pytest fixtures built on these.
"""
