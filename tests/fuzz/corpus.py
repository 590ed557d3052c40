"""Seeds and mutations for the TCP-level fuzzer (tests/fuzz/test_tcp_fuzz.py).

Seeds are real request frames: the valid request of every API key from
tests/enforce/test_admin_apis.py (the corpus the sans-IO fuzzer mutates), a blank request of
every advertised (API key, version) pair, and the SASL frames a client sends before it is
authenticated. A case is a short stream for one connection: a few valid frames, one mutated
frame, maybe more valid frames, and a sentinel ApiVersions whose answer tells the client that
the proxy has handled everything before it. Every case is derived from `random.Random` seeded
with "<seed>/<index>", so one case replays alone, byte for byte.
"""

from __future__ import annotations

import dataclasses
import random
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aclgate.protocol.codec import decode_request, encode_request
from aclgate.protocol.header import MalformedRequest, UnknownApi, parse_request_header
from aclgate.protocol.versions import KIO_RANGES, request_class
from tests.fixtures.scripted_broker import _defaults

SIZE = struct.Struct(">i")
I16 = struct.Struct(">h")
#: client_id of every fuzz frame (the proxy's own connections use "aclgate", "aclgate-control", "aclgate-bulk")
CLIENT_ID = "fuzz"
#: correlation ids: case * STRIDE + position of the frame in the case; the sentinel is last
STRIDE = 16
SENTINEL = STRIDE - 1
#: values written over a length or a count: null (compact 0, int16/int32 -1), empty, huge
#: (int32 max, a 5-byte varint): the inputs that found null-array and huge-array bugs
SPECIAL = (
    b"\x00",
    b"\x01",
    b"\xff\xff",
    b"\xff\xff\xff\xff",
    b"\0\0\0\0",
    b"\x7f\xff\xff\xff",
    b"\xff\xff\xff\xff\x0f",
    b"\x80\x80\x80\x80\x08",
)
SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 17, 36, 18


@dataclass(frozen=True)
class Seed:
    """One real request frame (correlation id 0, client id CLIENT_ID), with where it came from."""

    name: str
    frame: bytes
    api_key: int
    api_version: int
    body_offset: int
    #: served without a close on any authenticated connection (SASL frames are not: a
    #: handshake mid-session is a re-authentication)
    servable: bool = True


def seed(name: str, body: Any, servable: bool = True) -> Seed:
    frame = encode_request(0, body, CLIENT_ID)
    header = parse_request_header(frame)
    return Seed(name, frame, header.api_key, header.api_version, header.body_offset, servable)


def blank(api_key: int, version: int, **fields: Any) -> Any:
    """A request with zero values (empty arrays, empty bytes) in every field not given."""
    cls = request_class(api_key, version)
    for f in dataclasses.fields(cls):
        if f.name not in fields and f.metadata.get("kafka_type") in ("bytes", "records"):
            fields[f.name] = None if "None" in str(f.type) else b""
    return _defaults(cls, **fields)


def corpus_seeds() -> list[Seed]:
    """The valid request of every API key of tests/enforce/test_admin_apis.py."""
    from tests.enforce.test_admin_apis import CASES

    out = []
    for key in sorted(CASES):
        body = CASES[key].request()
        out.append(seed(f"admin-case {key} v{body.__version__}", body))
    return out


def blank_seeds(versions: Mapping[int, tuple[int, int]]) -> list[Seed]:
    """A blank request of every (API key, version) in `versions` that kio can encode."""
    out = []
    for key, (low, high) in sorted(versions.items()):
        kio_low, kio_high = KIO_RANGES.get(key, (1, 0))
        # Produce v0-2 are advertised as Kafka 4 does (KIP-896) but no longer exist in kio
        for version in range(max(low, kio_low), min(high, kio_high) + 1):
            try:
                out.append(seed(f"blank {key} v{version}", blank(key, version)))
            except (MalformedRequest, TypeError, ValueError):
                continue  # a field type blank() cannot fill: the corpus seed covers the key
    return out


def scram_first(user: str = "alice") -> bytes:
    return f"n,,n={user},r=fuzznonce0123456789".encode()


def sasl_seeds(mechanism: str = "SCRAM-SHA-256") -> list[Seed]:
    """What a client sends before it is authenticated: ApiVersions, SaslHandshake,
    SaslAuthenticate (a SCRAM client-first message, a PLAIN token with a wrong password)."""
    out = []
    for version in range(0, 5):
        fields = {}
        if version >= 3:
            fields = {"client_software_name": "fuzz", "client_software_version": "1.0"}
        out.append(seed(f"ApiVersions v{version}", blank(API_VERSIONS, version, **fields), False))
    for version in (0, 1):
        for mech in (mechanism, "PLAIN", "GSSAPI"):
            out.append(
                seed(
                    f"SaslHandshake v{version} {mech}",
                    blank(SASL_HANDSHAKE, version, mechanism=mech),
                    False,
                )
            )
    for version in (0, 1, 2):
        out.append(
            seed(
                f"SaslAuthenticate v{version} scram-first",
                blank(SASL_AUTHENTICATE, version, auth_bytes=scram_first()),
                False,
            )
        )
        out.append(
            seed(
                f"SaslAuthenticate v{version} plain-wrong",
                blank(SASL_AUTHENTICATE, version, auth_bytes=b"\0alice\0not-the-password"),
                False,
            )
        )
    return out


def sentinel_frame(correlation_id: int) -> bytes:
    return encode_request(correlation_id, blank(API_VERSIONS, 3, **_SOFTWARE), CLIENT_ID)


_SOFTWARE = {"client_software_name": "fuzz", "client_software_version": "1.0"}

# ------------------------------------------------------------------------------ mutations


def _set_size(data: bytearray) -> None:
    SIZE.pack_into(data, 0, len(data) - 4)


class Mutator:
    """Applies 1-3 random mutations to a seed frame; `log` says which, for the replay."""

    def __init__(self, rng: random.Random, seeds: Sequence[Seed], keys: Iterable[int]):
        self.rng = rng
        self.seeds = seeds
        self.keys = sorted(keys)
        self.log: list[str] = []

    def position(self, data: bytearray, body: int, first: int = 4) -> int:
        last = max(first, len(data) - 1)
        if self.rng.random() < 0.7:  # mostly past the header, where the structure is
            return self.rng.randint(min(body, last), last)
        return self.rng.randint(first, last)

    def mutate(self, s: Seed) -> bytes:
        rng = self.rng
        data = bytearray(s.frame)
        ops = (
            "flip", "flip", "bit", "special", "special", "truncate", "append", "size",
            "api_key", "api_version", "client_id", "splice", "delete", "repeat",
        )  # fmt: skip
        for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
            op = rng.choice(ops)
            getattr(self, f"_{op}")(data, s)
        return bytes(data)

    # each mutation: (frame, seed) -> None, in place, and a line in self.log

    def _flip(self, data: bytearray, s: Seed) -> None:
        at, xor = self.position(data, s.body_offset, 0), self.rng.randint(1, 255)
        data[at] ^= xor
        self.log.append(f"flip@{at}^{xor:#x}")

    def _bit(self, data: bytearray, s: Seed) -> None:
        at, bit = self.position(data, s.body_offset, 0), self.rng.randrange(8)
        data[at] ^= 1 << bit
        self.log.append(f"bit@{at}.{bit}")

    def _special(self, data: bytearray, s: Seed) -> None:
        at, value = self.position(data, s.body_offset), self.rng.choice(SPECIAL)
        data[at : at + len(value)] = value
        fix = self.rng.random() < 0.5
        if fix:
            _set_size(data)
        self.log.append(f"special@{at}={value.hex()}{'+size' if fix else ''}")

    def _truncate(self, data: bytearray, s: Seed) -> None:
        if len(data) <= 4:
            return
        at = self.position(data, s.body_offset)
        del data[at:]
        fix = self.rng.random() < 0.6
        if fix:
            _set_size(data)
        self.log.append(f"truncate@{at}{'+size' if fix else ''}")

    def _append(self, data: bytearray, s: Seed) -> None:
        extra = self.rng.randbytes(self.rng.randint(1, 32))
        data += extra
        fix = self.rng.random() < 0.6
        if fix:
            _set_size(data)
        self.log.append(f"append {extra.hex()}{'+size' if fix else ''}")

    def _size(self, data: bytearray, s: Seed) -> None:
        if len(data) < 4:
            return
        rng = self.rng
        size = rng.choice(
            (
                rng.randint(-(2**31), -1),
                rng.randint(0, 12),
                len(data) - 4 + rng.randint(-8, 8),
                2**31 - 1,
                104_857_600 + 1,  # one byte over --max-frame-bytes' default
                rng.randint(0, 2**31 - 1),
            )
        )
        SIZE.pack_into(data, 0, size)
        self.log.append(f"size={size}")

    def _api_key(self, data: bytearray, s: Seed) -> None:
        if len(data) < 6:
            return
        rng = self.rng
        key = rng.choice(
            (
                rng.choice(self.keys),  # another advertised API: the body is the wrong shape
                rng.choice(sorted(set(KIO_RANGES) - set(self.keys))),  # known, not advertised
                rng.randint(-(2**15), 2**15 - 1),
                SASL_HANDSHAKE,
                SASL_AUTHENTICATE,
            )
        )
        I16.pack_into(data, 4, key)
        self.log.append(f"api_key={key}")

    def _api_version(self, data: bytearray, s: Seed) -> None:
        if len(data) < 8:
            return
        rng = self.rng
        low, high = KIO_RANGES.get(s.api_key, (0, 0))
        version = rng.choice(
            (
                rng.randint(low, high),  # another version: flexible <-> not, fields differ
                high + 1,
                low - 1,
                rng.randint(-(2**15), 2**15 - 1),
            )
        )
        I16.pack_into(data, 6, version)
        self.log.append(f"api_version={version}")

    def _client_id(self, data: bytearray, s: Seed) -> None:
        if len(data) < 14:
            return
        length = self.rng.choice((-1, -2, 0, 200, 2**15 - 1, len(data)))
        I16.pack_into(data, 12, length)
        self.log.append(f"client_id_len={length}")

    def _splice(self, data: bytearray, s: Seed) -> None:
        """This frame's header with another API's body (sizes kept consistent)."""
        other = self.rng.choice(self.seeds)
        data[s.body_offset :] = other.frame[other.body_offset :]
        _set_size(data)
        self.log.append(f"splice body of {other.name}")

    def _delete(self, data: bytearray, s: Seed) -> None:
        if len(data) <= s.body_offset + 1:
            return
        at = self.position(data, s.body_offset)
        n = self.rng.randint(1, 8)
        del data[at : at + n]
        _set_size(data)
        self.log.append(f"delete@{at}+{n}")

    def _repeat(self, data: bytearray, s: Seed) -> None:
        at = self.position(data, s.body_offset)
        n = self.rng.randint(1, 16)
        data[at:at] = data[at : at + n] * self.rng.randint(1, 4)
        _set_size(data)
        self.log.append(f"repeat@{at}+{n}")


# ---------------------------------------------------------------------------------- cases


@dataclass
class Case:
    """One connection's worth of input."""

    index: int
    target: str
    #: the stream, and where the client splits it into writes
    data: bytes
    cuts: list[int]
    #: human-readable: the seeds used and the mutations, for the failure message
    story: list[str]
    #: the correlation id of the sentinel ApiVersions at the end
    sentinel: int
    #: no mutation at all: the proxy must serve it and answer the sentinel
    clean: bool = False
    #: log in with SASL first (post-authentication cases)
    login: bool = False
    #: bytes for a TLS port, sent without TLS
    no_tls: bool = False
    frames: list[bytes] = field(default_factory=list)

    def describe(self) -> str:
        return f"case {self.index} on {self.target}: " + "; ".join(self.story)


def with_correlation_id(frame: bytes, correlation_id: int) -> bytes:
    data = bytearray(frame)
    struct.pack_into(">i", data, 8, correlation_id)
    return bytes(data)


def make_case(
    seed_value: str,
    index: int,
    target: str,
    seeds: Sequence[Seed],
    keys: Iterable[int],
    *,
    prefix: Sequence[Seed] = (),
    login: bool = False,
    no_tls: bool = False,
    serves: bool = True,
) -> Case:
    """Case `index` of the run seeded `seed_value`, for `target`.

    `seeds` are what gets mutated; `prefix` seeds may be sent (valid) before the mutated frame
    (e.g. a SaslHandshake, so that a mutated SaslAuthenticate passes the SASL gate). `serves`:
    the target serves unmutated servable seeds (False before SASL authentication)."""
    rng = random.Random(f"{seed_value}/{index}")
    base = index * STRIDE
    frames: list[bytes] = []
    story: list[str] = []
    mutator = Mutator(rng, seeds, keys)

    servable = [serves and not no_tls]

    def valid(pool: Sequence[Seed]) -> None:
        s = rng.choice(pool)
        frames.append(with_correlation_id(s.frame, base + len(frames)))
        story.append(f"valid {s.name}")
        servable[0] = servable[0] and s.servable

    for _ in range(rng.choice((0, 0, 0, 1, 1, 2))):
        valid(list(prefix) + list(seeds) if prefix and rng.random() < 0.7 else seeds)
    roll = rng.random()
    clean = False
    if roll < 0.04:  # garbage: no Kafka structure at all
        size = rng.choice((rng.randint(1, 64), rng.randint(-(2**31), 2**31 - 1)))
        junk = rng.randbytes(rng.randint(0, 96))
        frames.append(SIZE.pack(size) + junk if rng.random() < 0.5 else junk)
        story.append(f"garbage {frames[-1].hex()}")
    elif roll < 0.08:  # a real frame, unchanged: the proxy must serve it
        valid(seeds)
        clean = servable[0]
    else:
        s = rng.choice(seeds)
        frame = with_correlation_id(s.frame, base + len(frames))
        frames.append(mutator.mutate(Seed(s.name, frame, s.api_key, s.api_version, s.body_offset)))
        story.append(f"mutated {s.name}: {', '.join(mutator.log)}")
    for _ in range(rng.choice((0, 0, 0, 1))):
        valid(seeds)
        clean = False
    sentinel = base + SENTINEL
    frames.append(sentinel_frame(sentinel))
    data = b"".join(frames)
    cuts: list[int] = []
    if len(data) > 1 and rng.random() < 0.3:  # several writes: frames split across reads
        cuts = sorted(set(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 3)))))
        story.append(f"written in pieces at {cuts}")
    return Case(
        index,
        target,
        data,
        cuts,
        story,
        sentinel,
        clean=clean,
        login=login,
        no_tls=no_tls,
        frames=frames,
    )


# ------------------------------------------------------------------ reading a stream back


def split_frames(data: bytes | bytearray) -> tuple[list[bytes], bytes]:
    """Whole frames of a stream as the proxy cuts them, and the incomplete rest."""
    out, pos = [], 0
    while len(data) - pos >= 4:
        (size,) = SIZE.unpack_from(data, pos)
        if size < 0 or pos + 4 + size > len(data):
            break
        out.append(bytes(data[pos : pos + 4 + size]))
        pos += 4 + size
    return out, bytes(data[pos:])


@dataclass(frozen=True)
class Parsed:
    """What a request frame is to a broker: its header ids, and whether it parses."""

    api_key: int | None
    api_version: int | None
    correlation_id: int | None
    client_id: str | None
    error: str | None  # None: header and body parse (kio) as this key and version

    @property
    def ids(self) -> tuple[Any, ...]:
        return (self.api_key, self.api_version, self.correlation_id, self.client_id)


def parse(frame: bytes) -> Parsed:
    try:
        header = parse_request_header(frame)
    except UnknownApi as exc:
        return Parsed(exc.api_key, exc.api_version, exc.correlation_id, None, f"{exc}")
    except MalformedRequest as exc:
        return Parsed(None, None, None, None, f"header: {exc}")
    ids = (header.api_key, header.api_version, header.correlation_id, header.client_id)
    try:
        decode_request(frame, header)
    except MalformedRequest as exc:
        return Parsed(*ids, f"body: {exc}")
    return Parsed(*ids, None)
