"""aclgate's IO layer: listeners, connections, event loop, CLI."""

__version__ = "0.1.0"
