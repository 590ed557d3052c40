"""The audit trail: decisions recorded, aggregated and written (file, Kafka topic, spool), and the dry-run settings file."""
