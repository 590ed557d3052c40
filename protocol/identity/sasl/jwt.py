"""JWT (JWS compact) validation against a JWKS, as Kafka's broker-side OAuth validator
(ValidatorAccessTokenValidator on jose4j) does it.

The JOSE work is PyJWT's: parsing JWKs into keys (`PyJWK`) and verifying JWS signatures
(`PyJWS`). What is Kafka's is ours: the algorithm allow-list (never `none`, never HMAC: a
JWKS holds public keys), `crit` refused, the key chosen by `kid`/`kty`/`alg`/`use`, RSA keys
of 2048 bits at least, required `exp` and `iat`, `exp`/`nbf` with clock skew, `aud` and `iss`
when configured, the principal claim (default `sub`) and the scope claim, each with Kafka's
error message. The current time is a parameter, and keys come from a `Jwks` or from an
injected `KeySource` (proxy/security/jwks.py fetches them over HTTPS): nothing here reads a clock, a
file or the network.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import jwt as pyjwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from aclgate.protocol.identity.groups import TooManyGroupsError, group_principals
from aclgate.protocol.identity.sasl.pending import SaslPending

__all__ = [
    "GroupsClaimError",
    "Jwk",
    "Jwks",
    "JwtValidationError",
    "JwtValidator",
    "KeySource",
    "OAuthBearerToken",
    "claim_value",
    "groups_from_claims",
]

_EC_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}
_CURVE_ALG = {crv: alg for alg, crv in _EC_CURVES.items()}
SUPPORTED_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}
)
MIN_RSA_BITS = 2048  # jose4j refuses smaller RSA keys
#: a `kid` longer than this never makes the key set be fetched again (Kafka's
#: RefreshingHttpsJwks.MISSING_KEY_ID_MAX_KEY_LENGTH): key ids are short, such a token is junk
MAX_REFRESH_KID_LENGTH = 1000
#: PyJWT's signature algorithms (RSASSA-PKCS1-v1_5, RSASSA-PSS, ECDSA with JWS's r||s). Not
#: PyJWS.decode: it checks the base64url alphabet one character at a time in Python (about
#: 30 µs for a 1 KB token, 20 ms for a 500 KB one, on the event loop; ours: 3 ms), and the
#: sections are decoded here strictly already
_ALGORITHMS = {name: pyjwt.PyJWS().get_algorithm_by_name(name) for name in SUPPORTED_ALGORITHMS}


class JwtValidationError(ValueError):
    """The token is not acceptable; the message is for the server's log only."""


class GroupsClaimError(JwtValidationError):
    """A validly signed token whose groups claim is of the wrong type (not a string or an
    array of strings) or holds more groups than a session may (protocol/identity/groups.py).
    The login fails with this message, which names the claim (the token is the client's own,
    so nothing leaks): fail closed, never a session without the groups the IdP meant."""


def b64url_decode(text: str) -> bytes:
    """Strict base64url without padding, as JWS requires."""
    if not text or "=" in text or not text.isascii():
        raise JwtValidationError("invalid base64url section")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise JwtValidationError("invalid base64url section") from None


@dataclass(frozen=True)
class Jwk:
    """One usable public key from a JWKS."""

    kty: str  # "RSA" or "EC"
    key: rsa.RSAPublicKey | ec.EllipticCurvePublicKey
    kid: str | None = None
    alg: str | None = None
    use: str | None = None
    crv: str | None = None

    def accepts(self, alg: str) -> bool:
        if self.use not in (None, "sig"):
            return False
        if self.alg is not None and self.alg != alg:
            return False
        if alg.startswith(("RS", "PS")):
            return self.kty == "RSA"
        if alg in _EC_CURVES:
            return self.kty == "EC" and self.crv == _EC_CURVES[alg]
        return False


@dataclass(frozen=True)
class Jwks:
    """A JSON Web Key Set; keys of other types (oct, OKP, ...) are skipped."""

    keys: tuple[Jwk, ...]

    @classmethod
    def from_json(cls, text: str | bytes) -> Jwks:
        """Parse a JWKS document (`{"keys": [...]}`); raises ValueError with the reason."""
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"JWKS is not valid JSON: {e}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
            raise ValueError('JWKS must be a JSON object with a "keys" array')
        keys = []
        for i, obj in enumerate(doc["keys"]):
            if not isinstance(obj, dict):
                raise ValueError(f"JWKS key #{i} is not an object")
            try:
                jwk = _parse_jwk(obj)
            except (ValueError, TypeError, pyjwt.PyJWTError) as e:
                raise ValueError(f"JWKS key #{i} ({obj.get('kid', 'no kid')}): {e}") from None
            if jwk is not None:
                keys.append(jwk)
        return cls(tuple(keys))

    def kids(self) -> frozenset[str]:
        return frozenset(k.kid for k in self.keys if k.kid is not None)


def _parse_jwk(obj: Mapping[str, Any]) -> Jwk | None:
    """PyJWK builds the key; we check what jose4j checks on top (RSA size, the curves)."""
    kty = obj.get("kty")
    common = {
        "kid": obj.get("kid") if isinstance(obj.get("kid"), str) else None,
        "alg": obj.get("alg") if isinstance(obj.get("alg"), str) else None,
        "use": obj.get("use") if isinstance(obj.get("use"), str) else None,
    }
    if kty == "RSA":
        for member in ("n", "e"):
            if not isinstance(obj.get(member), str):
                raise ValueError(f"JWK member {member!r} must be a string")
        public = {k: obj[k] for k in ("kty", "n", "e")}  # never a private key, whatever it holds
        key = pyjwt.PyJWK(public, algorithm="RS256").key
        if key.key_size < MIN_RSA_BITS:
            raise ValueError(
                f"RSA key of {key.key_size} bits is too small (minimum {MIN_RSA_BITS})"
            )
        return Jwk("RSA", key, **common)
    if kty == "EC":
        crv = obj.get("crv")
        if crv not in _CURVE_ALG:
            raise ValueError(f"unsupported EC curve {crv!r}")
        for member in ("x", "y"):
            if not isinstance(obj.get(member), str):
                raise ValueError(f"JWK member {member!r} must be a string")
        public = {k: obj[k] for k in ("kty", "crv", "x", "y")}
        key = pyjwt.PyJWK(public, algorithm=_CURVE_ALG[crv]).key
        return Jwk("EC", key, crv=crv, **common)
    return None


@runtime_checkable
class KeySource(Protocol):
    """Where a validator gets its keys when they can change while it runs (a JWKS URL)."""

    def current(self) -> Jwks:
        """The key set in force now."""

    def refresh_for(self, kid: str) -> SaslPending | None:
        """A token names `kid`, which `current()` lacks: a SaslPending to wait on while the
        key set is fetched again, or None when it will not be (rate limit, no endpoint)."""

    def when_fetched(self, callback: Callable[[], None]) -> None:
        """Call `callback` once, on the event loop, when the fetch under way has ended (at
        once if none is)."""


@dataclass(frozen=True)
class OAuthBearerToken:
    """A validated token (Kafka's BasicOAuthBearerToken)."""

    value: str
    principal_name: str
    lifetime_ms: int  # the `exp` claim in epoch milliseconds
    start_time_ms: int | None  # `iat`
    scope: frozenset[str] = frozenset()
    claims: Mapping[str, Any] = field(default_factory=dict, repr=False)
    #: the group names of the groups claim (`groups_claim`), in the token's order, distinct
    groups: tuple[str, ...] = ()


def _numeric_date(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise JwtValidationError(f"Could not extract the '{name}' claim from the access token")
    return float(value)


def _claim_string(name: str, value: object) -> str:
    # ClaimValidationUtils.validateString
    if value is None:
        raise JwtValidationError(f"{name} value must be non-null")
    if not isinstance(value, str):
        raise JwtValidationError(f"Could not extract the '{name}' claim from the access token")
    if not value:
        raise JwtValidationError(f"{name} value must be non-empty")
    text = value.strip()
    if not text:
        raise JwtValidationError(f"{name} value must not contain only whitespace")
    return text


def _json_type(value: object) -> str:
    """How a JSON value is named in an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def claim_value(claims: Mapping[str, Any], name: str) -> Any:
    """The claim `name`: the top-level claim of exactly that name if there is one (a namespaced
    claim such as `https://example.com/groups`), else a dot-separated path into nested objects
    (`realm_access.roles`). None when it is absent or null anywhere along the path;
    GroupsClaimError when a step of the path is not an object."""
    if name in claims:
        return claims[name]
    parts = name.split(".")
    value: Any = claims
    for i, part in enumerate(parts):
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise GroupsClaimError(
                f"the groups claim '{name}': '{'.'.join(parts[:i])}' is {_json_type(value)}, "
                "not an object"
            )
        value = value.get(part)
    return value


def groups_from_claims(claims: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """The group names in the claim `name` (claim_value): a string is one group (never split:
    directory group names hold spaces and commas), an array of strings one group each; absent
    or null, none. Any other type, an array holding anything but strings, or more groups or
    longer names than groups.py allows: GroupsClaimError naming the claim."""
    value = claim_value(claims, name)
    if value is None:
        return ()
    if isinstance(value, str):
        items: list[Any] = [value]
    elif isinstance(value, list):
        items = value
    else:
        raise GroupsClaimError(
            f"the groups claim '{name}' is {_json_type(value)}; it must be a string or an "
            "array of strings"
        )

    def checked() -> Iterable[str]:
        for item in items:
            if not isinstance(item, str):
                raise GroupsClaimError(
                    f"the groups claim '{name}' holds {_json_type(item)}; it must be a string "
                    "or an array of strings"
                )
            yield item

    try:  # the bounds stop the walk early: a 512 KiB token may list 50,000 names
        group_principals(checked())
    except TooManyGroupsError as exc:
        raise GroupsClaimError(f"the groups claim '{name}': {exc}") from None
    return tuple(dict.fromkeys(item for item in items if item))


class JwtValidator:
    """Validates bearer tokens; configured like Kafka's `sasl.oauthbearer.*` broker settings."""

    def __init__(
        self,
        jwks: Jwks | KeySource,
        *,
        expected_audiences: Iterable[str] | None = None,
        expected_issuer: str | None = None,
        clock_skew_seconds: int = 30,
        principal_claim: str = "sub",
        scope_claim: str = "scope",
        algorithms: Iterable[str] = SUPPORTED_ALGORITHMS,
        groups_claim: str | None = None,
    ) -> None:
        """`jwks`: a fixed key set (a JWKS file), or a KeySource whose keys change while the
        proxy runs (a JWKS URL, proxy/security/jwks.py). `groups_claim`: the claim (or
        dot-separated path) holding the token's groups (groups_from_claims); None: none."""
        self.source: KeySource | None = None if isinstance(jwks, Jwks) else jwks
        self._fixed = jwks if isinstance(jwks, Jwks) else None
        self.audiences = frozenset(expected_audiences or ())
        self.issuer = expected_issuer
        self.clock_skew_seconds = clock_skew_seconds
        self.principal_claim = principal_claim
        self.scope_claim = scope_claim
        self.algorithms = frozenset(algorithms) & SUPPORTED_ALGORITHMS
        self.groups_claim = groups_claim

    @property
    def jwks(self) -> Jwks:
        """The key set in force now."""
        if self._fixed is not None:
            return self._fixed
        assert self.source is not None  # one of the two is given (__init__)
        return self.source.current()

    def validate(self, token: str, now_ms: int, *, may_wait: bool = False) -> OAuthBearerToken:
        """Return the validated token or raise JwtValidationError.

        `may_wait`: when the token names a key id the key set lacks and the KeySource will
        fetch the set again, raise its SaslPending (validate again once it calls back)
        instead of refusing the token now."""
        token = token.strip()
        if not token:
            raise JwtValidationError(
                "Empty JWT provided; expected three sections (header, payload, and signature)"
            )
        sections = token.split(".")
        if len(sections) != 3:
            raise JwtValidationError(
                "Malformed JWT provided; expected three sections (header, payload, and "
                f"signature), but {len(sections)} sections provided"
            )
        for part, name in zip(sections, ("header", "payload", "signature"), strict=True):
            if not part.strip():
                raise JwtValidationError(
                    "Malformed JWT provided; expected at least three sections (header, payload, "
                    f"and signature), but {name} section missing"
                )
        header = self._json_object(sections[0], "header")
        claims = self._json_object(sections[1], "payload")
        self._verify_signature(header, sections, may_wait)
        return self._check_claims(token, claims, now_ms)

    @staticmethod
    def _json_object(section: str, what: str) -> dict[str, Any]:
        try:
            obj = json.loads(b64url_decode(section))
        except (ValueError, UnicodeDecodeError):
            raise JwtValidationError(
                f"Could not validate the access token: invalid JSON {what}"
            ) from None
        if not isinstance(obj, dict):
            raise JwtValidationError(
                f"Could not validate the access token: {what} is not a JSON object"
            )
        return obj

    def _verify_signature(
        self, header: Mapping[str, Any], sections: list[str], may_wait: bool
    ) -> None:
        alg = header.get("alg")
        if not isinstance(alg, str) or alg.lower() == "none":
            raise JwtValidationError(
                "Could not validate the access token: 'none' is not an allowed algorithm"
            )
        if alg not in self.algorithms:
            raise JwtValidationError(
                f"Could not validate the access token: algorithm {alg!r} is not allowed"
            )
        if "crit" in header:
            raise JwtValidationError(
                "Could not validate the access token: unrecognized critical headers"
            )
        kid = header.get("kid")
        jwks = self.jwks
        candidates = [k for k in jwks.keys if k.accepts(alg) and (kid is None or k.kid == kid)]
        if (
            not candidates
            and may_wait
            and self.source is not None
            and isinstance(kid, str)
            and 0 < len(kid) <= MAX_REFRESH_KID_LENGTH
            and kid not in jwks.kids()
        ):
            pending = self.source.refresh_for(kid)
            if pending is not None:
                raise pending
        if len(candidates) != 1:
            raise JwtValidationError(
                f"Could not validate the access token: unable to find a suitable verification key "
                f"for kid={kid!r} alg={alg} ({len(candidates)} candidates)"
            )
        signature = b64url_decode(sections[2])
        algorithm = _ALGORITHMS[alg]
        signing_input = f"{sections[0]}.{sections[1]}".encode("ascii")
        try:
            valid = algorithm.verify(
                signing_input, algorithm.prepare_key(candidates[0].key), signature
            )
        except (pyjwt.PyJWTError, ValueError, TypeError):
            valid = False
        if not valid:
            raise JwtValidationError(
                "Could not validate the access token: JWS signature is invalid"
            )

    def _check_claims(self, token: str, claims: Mapping[str, Any], now_ms: int) -> OAuthBearerToken:
        now = now_ms / 1000.0
        skew = self.clock_skew_seconds
        exp = _numeric_date(claims, "exp")
        if exp is None:
            raise JwtValidationError(
                "Could not validate the access token: No Expiration Time (exp) claim present."
            )
        iat = _numeric_date(claims, "iat")
        if iat is None:
            raise JwtValidationError(
                "Could not validate the access token: No Issued At (iat) claim present."
            )
        if now >= exp + skew:
            raise JwtValidationError(
                f"Could not validate the access token: The JWT is no longer valid - the evaluation "
                f"time {now:.0f} is on or after the Expiration Time (exp={exp:.0f}) claim value "
                f"(even when providing {skew} seconds of leeway to account for clock skew)."
            )
        nbf = _numeric_date(claims, "nbf")
        if nbf is not None and now + skew < nbf:
            raise JwtValidationError(
                f"Could not validate the access token: The JWT is not yet valid as the evaluation "
                f"time {now:.0f} is before the Not Before (nbf={nbf:.0f}) claim time (even when "
                f"providing {skew} seconds of leeway to account for clock skew)."
            )
        if self.issuer is not None and claims.get("iss") != self.issuer:
            raise JwtValidationError(
                f"Could not validate the access token: Issuer (iss) claim value "
                f"({claims.get('iss')}) doesn't match expected value of {self.issuer}"
            )
        if self.audiences:
            aud = claims.get("aud")
            auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else None
            if auds is None:
                raise JwtValidationError(
                    "Could not validate the access token: No Audience (aud) claim present."
                )
            if not any(isinstance(a, str) and a in self.audiences for a in auds):
                raise JwtValidationError(
                    f"Could not validate the access token: Audience (aud) claim {auds} doesn't "
                    f"contain an acceptable identifier. Expected one of {sorted(self.audiences)} as an aud value."
                )
        raw_scope = claims.get(self.scope_claim)
        scope_items = (
            [raw_scope]
            if isinstance(raw_scope, str)
            else raw_scope
            if isinstance(raw_scope, list)
            else []
        )
        scopes: set[str] = set()
        for item in scope_items:
            value = _claim_string(self.scope_claim, item)
            if value in scopes:
                raise JwtValidationError(
                    f"{self.scope_claim} value must not contain duplicates - {value} already present"
                )
            scopes.add(value)
        if exp < 0:
            raise JwtValidationError(
                f'exp value must be non-negative; value given was "{int(exp * 1000)}"'
            )
        if iat < 0:
            raise JwtValidationError(
                f'iat value must be null or non-negative; value given was "{int(iat * 1000)}"'
            )
        principal = _claim_string(self.principal_claim, claims.get(self.principal_claim))
        # last: only a token that passed every other check hears about its groups claim
        groups = groups_from_claims(claims, self.groups_claim) if self.groups_claim else ()
        return OAuthBearerToken(
            value=token,
            principal_name=principal,
            lifetime_ms=int(exp * 1000),
            start_time_ms=int(iat * 1000),
            scope=frozenset(scopes),
            claims=dict(claims),
            groups=groups,
        )
