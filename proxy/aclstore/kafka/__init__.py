"""The kafka ACL store: records in a compacted topic, written transactionally, replayed in order (KIP-801's model); the pure state machine and record codecs are in authz/."""
