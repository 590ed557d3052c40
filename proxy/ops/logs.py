"""Logging set-up shared by the long-running commands, and escaping for log lines that carry
client input."""

from __future__ import annotations

import logging
import re
import sys


def configure_logging(level: str = "INFO", tag: str = "") -> None:
    """Log lines to stderr; `tag` (e.g. "worker-1 ") goes before the logger name, so the
    lines of several worker processes sharing one stderr tell which process wrote them."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(
            "%(asctime)s %(levelname)-7s " + tag.replace("%", "%%") + "%(name)s: %(message)s",
            "%Y-%m-%dT%H:%M:%S",
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


#: what log_safe escapes: C0 controls (newline, carriage return, escape, ...), DEL, C1
#: controls, and the Unicode line and paragraph separators some log viewers break lines at
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def log_safe(text: str) -> str:
    """`text` with control characters escaped (newline as \\n, ESC as \\x1b, ...), for a log
    line that includes anything a client chose (topic and group names, client ids, SASL
    mechanism names and user names, certificate subjects): a client must not be able to end
    the line and forge another one, or send terminal escapes to whoever reads the log.

    Everything else is kept as it is (backslashes too, so a Kafka-exact line stays exact),
    and a string without control characters is returned unchanged, without a copy.
    """
    if text.isprintable():  # the common case, checked in C without allocating
        return text
    return _UNSAFE.sub(_escape, text)
