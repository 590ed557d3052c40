"""Kafka's authorization model and decision procedure, pure Python and free of IO."""
