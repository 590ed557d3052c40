"""Sans-IO Kafka protocol handling: framing, headers, per-API request/response logic.

Nothing in this package touches sockets, files or the event loop: bytes in, values out.
"""
