"""Salted credentials: SCRAM keys (RFC 5802) and password hashes for PLAIN.

Only these derived values are ever stored: a SCRAM credential lets a server check a proof but
not log in elsewhere without an expensive search, and the PLAIN hash (scrypt) is slow to brute
force. Pure functions; the users file (proxy/security/usersfile.py) persists them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "PLAIN",
    "SCRAM_DEFAULT_ITERATIONS",
    "SCRAM_MAX_ITERATIONS",
    "SCRAM_MECHANISMS",
    "SCRAM_MIN_ITERATIONS",
    "CredentialLookup",
    "PlainCredential",
    "ScramCredential",
    "hash_plain_password",
    "scram_credential",
    "scram_iterations_problem",
    "scram_salted_password",
]

PLAIN = "PLAIN"
# mechanism -> hashlib name; Kafka's ScramMechanism (minimum 4096, maximum 16384 iterations)
SCRAM_MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SCRAM_MIN_ITERATIONS = 4096
SCRAM_MAX_ITERATIONS = 16384
SCRAM_DEFAULT_ITERATIONS = 8192

# scrypt parameters for PLAIN hashes: N=2^14, r=8, p=1 is the scrypt paper's "interactive"
# setting (16 MiB, tens of ms per check), a fair price once per PLAIN connection.
PLAIN_SCRYPT_N = 1 << 14
PLAIN_SCRYPT_R = 8
PLAIN_SCRYPT_P = 1
_SCRYPT_MAXMEM = 64 * 1024 * 1024


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a SCRAM server keeps per user and mechanism (Kafka's ScramCredential)."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict[str, Any]:
        return {
            "salt": _b64(self.salt),
            "stored_key": _b64(self.stored_key),
            "server_key": _b64(self.server_key),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, mechanism: str, obj: dict[str, Any]) -> ScramCredential:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
        iterations = obj["iterations"]
        if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
            raise ValueError("iterations must be a positive integer")
        size = hashlib.new(SCRAM_MECHANISMS[mechanism]).digest_size
        stored, server = _unb64(obj["stored_key"]), _unb64(obj["server_key"])
        if len(stored) != size or len(server) != size:
            raise ValueError(f"{mechanism} keys must be {size} bytes")
        return cls(mechanism, _unb64(obj["salt"]), stored, server, iterations)


def scram_iterations_problem(iterations: int) -> str | None:
    """Why `iterations` is outside Kafka's ScramMechanism range (4096 to 16384), or None.

    Kafka refuses such a credential when it is created (AlterUserScramCredentials); the proxy
    also when it loads one, since a users file can be written by hand (docs/design.md)."""
    if SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
        return None
    return (
        f"iterations must be between {SCRAM_MIN_ITERATIONS} and {SCRAM_MAX_ITERATIONS} "
        f"(Kafka's range), got {iterations}"
    )


def scram_salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802; like Kafka, the password is UTF-8 without SASLprep."""
    return hashlib.pbkdf2_hmac(SCRAM_MECHANISMS[mechanism], password.encode(), salt, iterations)


def scram_keys(mechanism: str, salted_password: bytes) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) from a salted password."""
    digest = SCRAM_MECHANISMS[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    return client_key, stored_key, server_key


def scram_credential(
    mechanism: str,
    password: str,
    *,
    iterations: int = SCRAM_DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """Derive a SCRAM credential with a fresh random salt (or the given one)."""
    if mechanism not in SCRAM_MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
    problem = scram_iterations_problem(iterations)
    if problem is not None:
        raise ValueError(f"{mechanism} {problem}")
    salt = secrets.token_bytes(32) if salt is None else salt
    _, stored, server = scram_keys(
        mechanism, scram_salted_password(mechanism, password, salt, iterations)
    )
    return ScramCredential(mechanism, salt, stored, server, iterations)


@dataclass(frozen=True, slots=True)
class PlainCredential:
    """A scrypt hash of a PLAIN password with its own salt and cost parameters."""

    salt: bytes
    hash: bytes
    n: int = PLAIN_SCRYPT_N
    r: int = PLAIN_SCRYPT_R
    p: int = PLAIN_SCRYPT_P

    def verify(self, password: str) -> bool:
        """Constant-time check of a candidate password."""
        candidate = hashlib.scrypt(
            password.encode(),
            salt=self.salt,
            n=self.n,
            r=self.r,
            p=self.p,
            maxmem=_SCRYPT_MAXMEM,
            dklen=len(self.hash),
        )
        return hmac.compare_digest(candidate, self.hash)

    def to_json(self) -> dict[str, Any]:
        return {
            "alg": "scrypt",
            "n": self.n,
            "r": self.r,
            "p": self.p,
            "salt": _b64(self.salt),
            "hash": _b64(self.hash),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> PlainCredential:
        if obj.get("alg") != "scrypt":
            raise ValueError(f"unsupported PLAIN hash algorithm {obj.get('alg')!r}")
        n, r, p = obj["n"], obj["r"], obj["p"]
        for v in (n, r, p):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError("scrypt parameters must be positive integers")
        if n & (n - 1) or n * r * 128 > _SCRYPT_MAXMEM // 2 or p > 16:
            raise ValueError("scrypt parameters out of range")
        digest = _unb64(obj["hash"])
        if not 16 <= len(digest) <= 64:
            raise ValueError("scrypt hash must be 16 to 64 bytes")
        return cls(_unb64(obj["salt"]), digest, n, r, p)


def hash_plain_password(password: str, *, salt: bytes | None = None) -> PlainCredential:
    """Hash a password for PLAIN with a fresh 16-byte salt."""
    salt = secrets.token_bytes(16) if salt is None else salt
    digest = hashlib.scrypt(
        password.encode(),
        salt=salt,
        n=PLAIN_SCRYPT_N,
        r=PLAIN_SCRYPT_R,
        p=PLAIN_SCRYPT_P,
        maxmem=_SCRYPT_MAXMEM,
        dklen=32,
    )
    return PlainCredential(salt, digest)


# A fixed credential to check against when the user is unknown, so that an unknown user costs
# the same time as a wrong password. Built lazily (the hash is deliberately slow).
_DUMMY: list[PlainCredential] = []


def dummy_plain_credential() -> PlainCredential:
    if not _DUMMY:
        _DUMMY.append(hash_plain_password("\x00not a password\x00", salt=b"\x00" * 16))
    return _DUMMY[0]


class CredentialLookup(Protocol):
    """What the SASL servers need from a credential store (the users file implements it)."""

    def credentials_for(
        self, user: str, mechanism: str
    ) -> ScramCredential | PlainCredential | None:
        """The user's credential for `mechanism`, or None if there is none."""
        ...

    def groups_for(self, user: str) -> tuple[str, ...]:
        """The user's group names (the users file's `groups`); none for an unknown user. Asked
        right after `credentials_for`, of the same version of the store."""
        ...
