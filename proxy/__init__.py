"""aclgate's IO layer: listeners, connections, event loop, CLI."""
