"""A client certificate's subject as Kafka names it (docs/identity.md, "mTLS principal").

Kafka's DefaultKafkaPrincipalBuilder takes the peer certificate's subject as Java's
`X500Principal.getName()` prints it (RFC 2253 with the JDK's rules) and rewrites it with
`ssl.principal.mapping.rules` (SslPrincipalMapper). ACLs written for a Kafka cluster only keep
working behind the proxy if every byte of that name is the same, so this module mirrors the
JDK and Kafka code paths closely. protocol/identity/principal.py turns the name into a
principal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography import x509

__all__ = [
    "MappingRule",
    "NoMatchingRule",
    "SslPrincipalMapper",
    "name_rfc2253",
    "parse_rules",
    "subject_rfc2253",
]

# ---------------------------------------------------------------------------------------------
# RFC 2253 rendering (sun.security.x509.X500Name / RDN / AVA, as used by X500Principal)

# Keywords the JDK prints in RFC 2253 form (AVAKeyword with rfc2253Compliant=true); any other
# attribute type is printed as its dotted OID with a `#hex` value.
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}

# Universal tags the JDK renders as text (AVA.isDerString(value, false)). The JDK 17 decodes
# the content bytes of all of them as UTF-8, even BMPString (so "\00" escapes appear for its
# zero bytes) and TeletexString: the principal must be the same string, quirks included.
_STRING_TAGS = frozenset(
    {
        0x0C,  # UTF8String
        0x13,  # PrintableString
        0x14,  # TeletexString (T61)
        0x16,  # IA5String
        0x1B,  # GeneralString
        0x1E,  # BMPString
    }
)
_ESCAPEES = frozenset(',=+<>#;"\\')


class _DerError(ValueError):
    pass


def _read_tlv(buf: bytes, off: int) -> tuple[int, int, int]:
    """Return (tag, content_start, content_end) of the DER element at `off`."""
    if off + 2 > len(buf):
        raise _DerError("truncated DER element")
    tag = buf[off]
    if tag & 0x1F == 0x1F:
        raise _DerError("multi-byte DER tags are not supported in names")
    first = buf[off + 1]
    off += 2
    if first < 0x80:
        length = first
    else:
        n = first & 0x7F
        if n == 0 or n > 4 or off + n > len(buf):
            raise _DerError("unsupported DER length")
        length = int.from_bytes(buf[off : off + n], "big")
        off += n
    if off + length > len(buf):
        raise _DerError("DER element overruns its container")
    return tag, off, off + length


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _decode_oid(content: bytes) -> str:
    if not content:
        raise _DerError("empty OID")
    arcs: list[int] = []
    value = 0
    for b in content:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            arcs.append(value)
            value = 0
    if content[-1] & 0x80:
        raise _DerError("truncated OID")
    first = arcs[0]
    head = [0, first] if first < 40 else [1, first - 40] if first < 80 else [2, first - 80]
    return ".".join(str(a) for a in head + arcs[1:])


def _escape_value(text: str) -> str:
    out = []
    for ch in text:
        if ch in _ESCAPEES:
            out.append("\\" + ch)
        elif ch == "\x00":
            out.append("\\00")
        else:
            out.append(ch)
    chars = "".join(out)
    # The JDK then escapes leading and trailing spaces and carriage returns.
    lead = 0
    while lead < len(chars) and chars[lead] in " \r":
        lead += 1
    trail = len(chars) - 1
    while trail >= 0 and chars[trail] in " \r":
        trail -= 1
    return "".join(("\\" + c) if (i < lead or i > trail) else c for i, c in enumerate(chars))


def _ava_string(oid: str, tag: int, content: bytes) -> str:
    keyword = _RFC2253_KEYWORDS.get(oid)
    if keyword is None or tag not in _STRING_TAGS:
        hexed = (bytes([tag]) + _der_length(len(content)) + content).hex()
        return f"{keyword or oid}=#{hexed}"
    text = content.decode("utf-8", errors="replace")
    return f"{keyword}={_escape_value(text)}"


def name_rfc2253(name_der: bytes) -> str:
    """Render a DER-encoded X.501 Name as Java's `X500Principal.getName()` does."""
    tag, start, end = _read_tlv(name_der, 0)
    if tag != 0x30:
        raise _DerError("a Name must be a SEQUENCE")
    rdns: list[str] = []
    off = start
    while off < end:
        set_tag, s_start, s_end = _read_tlv(name_der, off)
        if set_tag != 0x31:
            raise _DerError("an RDN must be a SET")
        avas: list[str] = []
        a_off = s_start
        while a_off < s_end:
            seq_tag, q_start, q_end = _read_tlv(name_der, a_off)
            if seq_tag != 0x30:
                raise _DerError("an attribute must be a SEQUENCE")
            oid_tag, o_start, o_end = _read_tlv(name_der, q_start)
            if oid_tag != 0x06:
                raise _DerError("an attribute type must be an OID")
            v_tag, v_start, v_end = _read_tlv(name_der, o_end)
            if v_end != q_end:
                raise _DerError("trailing bytes in an attribute")
            avas.append(
                _ava_string(_decode_oid(name_der[o_start:o_end]), v_tag, name_der[v_start:v_end])
            )
            a_off = q_end
        rdns.append("+".join(avas))
        off = s_end
    # RFC 2253 prints the most specific RDN first: the reverse of the DER order.
    return ",".join(reversed(rdns))


def subject_rfc2253(cert_der: bytes) -> str:
    """The certificate subject as Kafka sees it (`X500Principal.getName()`)."""
    cert = x509.load_der_x509_certificate(cert_der)
    return name_rfc2253(cert.subject.public_bytes())


# ---------------------------------------------------------------------------------------------
# ssl.principal.mapping.rules (org.apache.kafka.common.security.ssl.SslPrincipalMapper)

_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
_BACK_REFERENCE = re.compile(r"\$(\d+)")
DEFAULT_RULES = "DEFAULT"


class NoMatchingRule(ValueError):
    """No mapping rule applies to a DN (Kafka fails the connection's authentication)."""


def _java_find_all(pattern: re.Pattern[str], text: str) -> list[re.Match[str]]:
    """Successive `Matcher.find()` results: after an empty match, the search moves on by one."""
    out = []
    pos = 0
    while pos <= len(text):
        m = pattern.search(text, pos)
        if m is None:
            break
        out.append(m)
        pos = m.end() + 1 if m.end() == m.start() else m.end()
    return out


def _java_trim(s: str) -> str:
    """`String.trim()`: strips every char <= U+0020, not just whitespace."""
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


def _expand_java_replacement(m: re.Match[str], replacement: str) -> str:
    """Expand `replacement` as java.util.regex.Matcher.appendReplacement does."""
    out = []
    i = 0
    groups = m.re.groups
    while i < len(replacement):
        c = replacement[i]
        if c == "\\":
            i += 1
            if i >= len(replacement):
                raise ValueError("character to be escaped is missing")
            out.append(replacement[i])
            i += 1
        elif c == "$":
            i += 1
            if i >= len(replacement):
                raise ValueError("Illegal group reference: group index is missing")
            if replacement[i] == "{":
                close = replacement.find("}", i)
                if close < 0:
                    raise ValueError("named capturing group is missing trailing '}'")
                name = replacement[i + 1 : close]
                if name not in m.re.groupindex:
                    raise ValueError(f"No group with name {{{name}}}")
                out.append(m.group(name) or "")
                i = close + 1
                continue
            if not replacement[i].isdigit() or not replacement[i].isascii():
                raise ValueError("Illegal group reference")
            ref = int(replacement[i])
            if ref > groups:
                raise IndexError(f"No group {ref}")
            i += 1
            while i < len(replacement) and replacement[i].isascii() and replacement[i].isdigit():
                candidate = ref * 10 + int(replacement[i])
                if candidate > groups:
                    break
                ref = candidate
                i += 1
            out.append(m.group(ref) or "")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _escape_literal_back_references(unescaped: str, num_groups: int) -> str:
    """Kafka's (NiFi's) rewrite of `$N` beyond the group count into a literal `$N`.

    The back-reference matcher runs over the original string while insertions shift the
    copy; that quirk is Kafka's and is kept so that odd rules map the same way.
    """
    if num_groups == 0:
        return unescaped
    value = unescaped
    for m in _BACK_REFERENCE.finditer(unescaped):
        digits = m.group(1)
        if digits.startswith("0"):
            continue
        index = int(digits)
        while index > num_groups and index >= 10:
            index //= 10
        if index > num_groups:
            start = m.start(1)
            value = value[: start - 1] + "\\" + value[start - 1 :]
    return value


@dataclass(frozen=True)
class _Rule:
    is_default: bool
    pattern: re.Pattern[str] | None = None
    pattern_text: str | None = None
    replacement: str | None = None
    to_lower: bool = False
    to_upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.is_default:
            return dn
        assert self.pattern is not None and self.replacement is not None
        if self.pattern.fullmatch(dn) is None:
            return None
        repl = _escape_literal_back_references(self.replacement, self.pattern.groups)
        pieces = []
        last = 0
        for m in _java_find_all(self.pattern, dn):
            pieces.append(dn[last : m.start()])
            pieces.append(_expand_java_replacement(m, repl))
            last = m.end()
        pieces.append(dn[last:])
        result = "".join(pieces)
        if self.to_lower:
            return result.lower()
        if self.to_upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.is_default:
            return "DEFAULT"
        text = "RULE:" + (self.pattern_text or "")
        if self.replacement is not None:
            text += "/" + self.replacement
        if self.to_lower:
            text += "/L"
        elif self.to_upper:
            text += "/U"
        return text


class SslPrincipalMapper:
    """Kafka's `ssl.principal.mapping.rules`: comma-separated `RULE:pattern/replacement/[LU]`
    and `DEFAULT` entries, tried in order; the first rule whose pattern matches the whole DN
    gives the name.

    Patterns are Python regular expressions compiled with re.ASCII, which makes `\\w`, `\\d`,
    `\\s`, `\\b` and case folding ASCII-only as in Java; Java-only syntax (`\\p{..}`,
    `[a&&[b]]`, `\\Q..\\E`) is not available and fails at parse time with a clear error.
    """

    def __init__(self, rules: list[_Rule]) -> None:
        self._rules = tuple(rules)

    @classmethod
    def from_rules(cls, rules: str | None) -> SslPrincipalMapper:
        """Parse a rules string; raises ValueError with Kafka's messages for invalid rules."""
        return cls(parse_rules(DEFAULT_RULES if rules is None else rules))

    def get_name(self, distinguished_name: str) -> str:
        """Map an RFC 2253 DN to the principal name; raises NoMatchingRule."""
        for rule in self._rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self._rules_text()}")

    def _rules_text(self) -> str:
        return "[" + ", ".join(str(r) for r in self._rules) + "]"

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = {self._rules_text()})"

    __repr__ = __str__


def _java_regex(pattern: str) -> str:
    """Translate Java-only regex spellings that have a Python equivalent: named groups
    `(?<name>...)` and back references `\\k<name>`."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            if pattern[i + 1] == "k" and pattern[i + 2 : i + 3] == "<":
                end = pattern.find(">", i + 3)
                if end > 0:
                    out.append(f"(?P={pattern[i + 3 : end]})")
                    i = end + 1
                    continue
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if pattern.startswith("(?<", i) and pattern[i + 3 : i + 4] not in ("=", "!"):
            out.append("(?P<")
            i += 3
            continue
        out.append(c)
        i += 1
    return "".join(out)


#: one parsed rule: `apply(text)` gives its result, or None when its pattern does not match the
#: whole text (DEFAULT: the text itself)
MappingRule = _Rule


def parse_rules(rules: str) -> list[MappingRule]:
    """Kafka's rule syntax, parsed (ValueError with Kafka's messages); also the certificate
    group rules' (protocol/identity/certgroups.py)."""
    return [_parse_rule(r) for r in _split_rules(rules) if r is not None and r != ""]


def _split_rules(rules: str) -> list[str]:
    return [m.group(1) for m in _java_find_all(_RULE_SPLITTER, _java_trim(rules))]


def _parse_rule(rule: str) -> _Rule:
    m = _RULE_PARSER.match(rule)
    if m is None:
        raise ValueError(f"Invalid rule: {rule}")
    if m.end() != len(rule):
        raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[m.end() :]}`")
    if m.group(1) is not None:
        return _Rule(is_default=True)
    if m.group(2) is None:
        raise ValueError(f"Invalid rule: {rule}")
    pattern_text = m.group(2)
    try:
        pattern = re.compile(_java_regex(pattern_text), re.ASCII)
    except re.error as e:
        raise ValueError(f"Invalid rule: `{rule}`, bad pattern: {e}") from None
    flag = m.group(6)
    return _Rule(
        is_default=False,
        pattern=pattern,
        pattern_text=pattern_text,
        replacement=m.group(4),
        to_lower=flag == "L",
        to_upper=flag == "U",
    )
