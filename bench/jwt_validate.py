"""OAUTHBEARER token validation cost: `JwtValidator.validate` per token, by algorithm.

    python -m bench.jwt_validate                        # the validator in protocol/identity/sasl/jwt.py
    python -m bench.jwt_validate --compare OLD.py       # and another jwt.py side by side

Why: issue 15 moved JWT verification from hand-written code on `cryptography` to PyJWT, on
the condition that a benchmark shows the library costs no more than a login can afford. One
validation runs on the event loop for every OAUTHBEARER login and re-authentication. Each
figure is the best of 5 rounds of 2,000 validations of one valid token (RS256 and PS256 with
a 2048-bit key, ES256 on P-256), in microseconds per token; `--compare` loads another
implementation of the same API (e.g. `git show <commit>:protocol/identity/sasl/jwt.py > old.py`).
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import sys
import time
import timeit
from types import ModuleType
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

import aclgate.protocol.identity.sasl.jwt as current

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ROUNDS, NUMBER = 5, 2_000


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwks() -> str:
    rsa_pub = RSA_KEY.public_key().public_numbers()
    ec_pub = EC_KEY.public_key().public_numbers()
    return json.dumps(
        {
            "keys": [
                {
                    "kty": "RSA",
                    "kid": "rsa",
                    "n": _b64(rsa_pub.n.to_bytes(256, "big")),
                    "e": _b64(rsa_pub.e.to_bytes(3, "big")),
                },
                {
                    "kty": "EC",
                    "kid": "ec",
                    "crv": "P-256",
                    "x": _b64(ec_pub.x.to_bytes(32, "big")),
                    "y": _b64(ec_pub.y.to_bytes(32, "big")),
                },
            ]
        }
    )


def _token(alg: str, now: int) -> str:
    head = {"alg": alg, "typ": "JWT", "kid": "ec" if alg.startswith("ES") else "rsa"}
    claims = {"sub": "alice", "iat": now, "exp": now + 3600, "iss": "https://idp", "aud": "kafka"}
    signing_input = f"{_b64(json.dumps(head).encode())}.{_b64(json.dumps(claims).encode())}"
    data = signing_input.encode()
    if alg == "RS256":
        sig = RSA_KEY.sign(data, padding.PKCS1v15(), hashes.SHA256())
    elif alg == "PS256":
        sig = RSA_KEY.sign(data, padding.PSS(padding.MGF1(hashes.SHA256()), 32), hashes.SHA256())
    else:
        r, s = decode_dss_signature(EC_KEY.sign(data, ec.ECDSA(hashes.SHA256())))
        sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return f"{signing_input}.{_b64(sig)}"


def measure(module: ModuleType) -> dict[str, float]:
    """Microseconds per validation, by algorithm."""
    now = int(time.time())
    validator: Any = module.JwtValidator(
        module.Jwks.from_json(_jwks()), expected_audiences=["kafka"], expected_issuer="https://idp"
    )
    out = {}
    for alg in ("RS256", "PS256", "ES256"):
        token = _token(alg, now)
        validator.validate(token, now * 1000)  # warm up, and prove the token valid
        best = min(
            timeit.repeat(
                lambda t=token: validator.validate(t, now * 1000), number=NUMBER, repeat=ROUNDS
            )
        )
        out[alg] = best / NUMBER * 1e6
    return out


def _load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("jwt_compared", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", metavar="JWT_PY", help="another jwt.py to measure too")
    args = parser.parse_args()
    rows = {"protocol/identity/sasl/jwt.py": measure(current)}
    if args.compare:
        rows[args.compare] = measure(_load(args.compare))
    print(f"{'µs per validation':40} {'RS256':>8} {'PS256':>8} {'ES256':>8}")
    for name, figures in rows.items():
        print(f"{name:40} " + " ".join(f"{figures[a]:8.1f}" for a in ("RS256", "PS256", "ES256")))


if __name__ == "__main__":
    main()
