"""SASL PLAIN and SCRAM servers against our clients, kafka-python's and Kafka's formulas."""

from __future__ import annotations

import base64

import pytest
from kafka.net.sasl.plain import SaslMechanismPlain
from kafka.net.sasl.scram import ScramClient

from aclgate.protocol.identity.sasl import SaslAuthenticationError, SaslException, create_server
from aclgate.protocol.identity.sasl.client import PlainSaslClient, ScramSaslClient, create_client
from aclgate.protocol.identity.sasl.credentials import (
    SCRAM_MECHANISMS,
    PlainCredential,
    ScramCredential,
    hash_plain_password,
    scram_credential,
)
from aclgate.protocol.identity.sasl.scram import ScramSaslServer, sasl_name, username_from_sasl_name

SCRAM = sorted(SCRAM_MECHANISMS)


class Store:
    def __init__(self) -> None:
        self.creds: dict[tuple[str, str], ScramCredential | PlainCredential] = {}

    def add(self, user: str, password: str) -> Store:
        for m in SCRAM:
            self.creds[(user, m)] = scram_credential(m, password, iterations=4096)
        self.creds[(user, "PLAIN")] = hash_plain_password(password)
        return self

    def credentials_for(self, user: str, mechanism: str):
        return self.creds.get((user, mechanism))

    def groups_for(self, user: str) -> tuple[str, ...]:
        return ()


@pytest.fixture(scope="module")
def store() -> Store:
    return Store().add("alice", "alice-secret").add("a=b,c", "weird")


def generic(mechanism: str) -> str:
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


def run_scram(server, client) -> None:
    reply = server.evaluate(client.initial_response())
    reply = server.evaluate(client.evaluate_challenge(reply))
    assert client.evaluate_challenge(reply) is None


@pytest.mark.parametrize("mechanism", SCRAM)
@pytest.mark.parametrize(("user", "password"), [("alice", "alice-secret"), ("a=b,c", "weird")])
def test_scram_round_trip(store, mechanism, user, password) -> None:
    server = create_server(mechanism, credentials=store)
    client = ScramSaslClient(mechanism, user, password)
    run_scram(server, client)
    assert server.complete and client.complete
    assert server.authorization_id == user
    assert server.credential_expiration_ms() is None


@pytest.mark.parametrize("mechanism", SCRAM)
def test_scram_against_kafka_python(store, mechanism) -> None:
    """kafka-python's own SCRAM client implementation as an independent counterpart."""
    server = create_server(mechanism, credentials=store)
    client = ScramClient("alice", "alice-secret", mechanism)
    first = server.evaluate(client.first_message())
    client.process_server_first_message(first)
    final = server.evaluate(client.final_message())
    client.process_server_final_message(final)  # raises if our server signature is wrong
    assert server.authorization_id == "alice"


@pytest.mark.parametrize("mechanism", SCRAM)
def test_scram_kafka_python_wrong_password(store, mechanism) -> None:
    server = create_server(mechanism, credentials=store)
    client = ScramClient("alice", "nope", mechanism)
    client.process_server_first_message(server.evaluate(client.first_message()))
    with pytest.raises(SaslException) as e:
        server.evaluate(client.final_message())
    assert e.value.message == "Invalid client credentials"
    assert e.value.error_message(mechanism) == generic(mechanism)
    assert e.value.error_message(mechanism, reauthenticating=True) == generic(mechanism).replace(
        "during authentication", "during re-authentication"
    )
    assert not server.complete


def test_rfc7677_vector() -> None:
    """RFC 7677 section 3: the SCRAM-SHA-256 example exchange, byte for byte."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    store = Store()
    store.creds[("user", "SCRAM-SHA-256")] = scram_credential(
        "SCRAM-SHA-256", "pencil", iterations=4096, salt=salt
    )
    server = ScramSaslServer(
        "SCRAM-SHA-256", store, nonce_factory=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    )
    client = ScramSaslClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    first = client.initial_response()
    assert first == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = server.evaluate(first)
    assert server_first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = client.evaluate_challenge(server_first)
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    server_final = server.evaluate(final)
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert client.evaluate_challenge(server_final) is None and client.complete


def test_scram_unknown_user_fails_like_kafka(store) -> None:
    server = create_server("SCRAM-SHA-512", credentials=store)
    with pytest.raises(SaslException) as e:
        server.evaluate(b"n,,n=mallory,r=abc")
    assert not isinstance(e.value, SaslAuthenticationError)
    assert e.value.message == "Authentication failed: Invalid user credentials"
    assert e.value.error_message("SCRAM-SHA-512") == generic("SCRAM-SHA-512")
    with pytest.raises(SaslException, match="Unexpected challenge in Sasl server state FAILED"):
        server.evaluate(b"n,,n=alice,r=abc")


def test_scram_mechanism_mismatch_is_unknown(store) -> None:
    only512 = Store()
    only512.creds[("bob", "SCRAM-SHA-512")] = store.creds[("alice", "SCRAM-SHA-512")]
    with pytest.raises(SaslException, match="Invalid user credentials"):
        create_server("SCRAM-SHA-256", credentials=only512).evaluate(b"n,,n=bob,r=abc")


def _final_for(
    server_first: bytes, gs2: bytes = b"n,,", nonce: str | None = None, proof: bytes = b"x" * 64
) -> bytes:
    r = nonce or server_first.split(b",")[0][2:].decode()
    return b"c=" + base64.b64encode(gs2) + f",r={r},p=".encode() + base64.b64encode(proof)


@pytest.mark.parametrize(
    ("first", "message", "exposed"),
    [
        (
            b"n,a=bob,n=alice,r=abc",
            "Authentication failed: Client requested an authorization id that is different from username",
            True,
        ),
        (
            b"n,,n=alice,r=abc,tokenauth=true",
            "Token Authentication failed: Invalid tokenId : alice",
            False,
        ),
        (
            b"p=tls-unique,,n=alice,r=abc",
            "Invalid SCRAM client first message format: p=tls-unique,,n=alice,r=abc",
            False,
        ),
        (b"y,,n=alice,r=abc", "Invalid SCRAM client first message format: y,,n=alice,r=abc", False),
        (b"n,,n=alice", "Invalid SCRAM client first message format: n,,n=alice", False),
        (
            b"n,,n=al=ice,r=abc",
            "Invalid SCRAM client first message format: n,,n=al=ice,r=abc",
            False,
        ),
        (b"n,,n=alice,r=a,b", "Invalid SCRAM client first message format: n,,n=alice,r=a,b", False),
        (b"\xff\xfe", "Invalid SCRAM client first message format: \ufffd\ufffd", False),
    ],
)
def test_scram_first_message_errors(store, first, message, exposed) -> None:
    server = create_server("SCRAM-SHA-256", credentials=store)
    with pytest.raises(SaslException) as e:
        server.evaluate(first)
    assert e.value.message == message
    assert isinstance(e.value, SaslAuthenticationError) == exposed
    assert e.value.error_message("SCRAM-SHA-256") == (
        message if exposed else generic("SCRAM-SHA-256")
    )


def test_scram_extensions_and_authzid_accepted(store) -> None:
    """An authzid equal to the user and unknown extensions are fine (Kafka ignores the latter)."""
    server = create_server("SCRAM-SHA-256", credentials=store)
    server_first = server.evaluate(b"n,a=alice,n=alice,r=abc,foo=bar,tokenauth=false")
    assert isinstance(server, ScramSaslServer) and server.extensions == {"tokenauth": "false"}
    # build a correct proof by hand for the gs2 header "n,a=alice,"
    import hashlib
    import hmac

    cred = store.creds[("alice", "SCRAM-SHA-256")]
    salted = hashlib.pbkdf2_hmac("sha256", b"alice-secret", cred.salt, cred.iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    nonce = server_first.split(b",")[0][2:].decode()
    without_proof = "c=" + base64.b64encode(b"n,a=alice,").decode() + f",r={nonce}"
    auth = f"n=alice,r=abc,foo=bar,tokenauth=false,{server_first.decode()},{without_proof}".encode()
    sig = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, sig, strict=True))
    server.evaluate(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
    assert server.complete and server.authorization_id == "alice"


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("nonce", "Invalid client nonce in the final client message."),
        ("prefixed-nonce", "Invalid client nonce in the final client message."),
        ("binding", "Invalid channel binding in the final client message."),
        ("proof", "Invalid client credentials"),
        ("short-proof", "Invalid client credentials"),
        ("format", "Invalid SCRAM client final message format: c=biws,r=x"),
    ],
)
def test_scram_final_message_errors(store, kind, message) -> None:
    server = create_server("SCRAM-SHA-256", credentials=store)
    server_first = server.evaluate(b"n,,n=alice,r=abc")
    nonce = server_first.split(b",")[0][2:].decode()
    final = {
        "nonce": _final_for(server_first, nonce="abc" + "z" * 10),
        "prefixed-nonce": _final_for(server_first, nonce="X" + nonce),
        "binding": _final_for(server_first, gs2=b"y,,"),
        "proof": _final_for(server_first, proof=b"\x00" * 32),
        "short-proof": _final_for(server_first, proof=b"\x00" * 5),
        "format": b"c=biws,r=x",
    }[kind]
    with pytest.raises(SaslException) as e:
        server.evaluate(final)
    assert e.value.message == message
    assert e.value.error_message("SCRAM-SHA-256") == generic("SCRAM-SHA-256")
    assert not server.complete


def test_scram_low_iterations_refused() -> None:
    import hashlib

    store = Store()
    cred = scram_credential("SCRAM-SHA-512", "pw", iterations=4096)
    store.creds[("old", "SCRAM-SHA-512")] = ScramCredential(
        cred.mechanism, cred.salt, cred.stored_key, cred.server_key, 1000
    )
    with pytest.raises(
        SaslException, match="Iterations 1000 is less than the minimum 4096 for SCRAM_SHA_512"
    ):
        create_server("SCRAM-SHA-512", credentials=store).evaluate(b"n,,n=old,r=abc")
    assert hashlib  # keeps the import local to this test


def test_scram_after_complete(store) -> None:
    server = create_server("SCRAM-SHA-512", credentials=store)
    run_scram(server, ScramSaslClient("SCRAM-SHA-512", "alice", "alice-secret"))
    with pytest.raises(SaslException, match="Unexpected challenge in Sasl server state COMPLETE"):
        server.evaluate(b"n,,n=alice,r=abc")


def test_scram_client_rejects_bad_server(store) -> None:
    """Our client: a wrong server signature, a foreign nonce, weak iterations, server errors."""
    server = create_server("SCRAM-SHA-512", credentials=store)
    client = ScramSaslClient("SCRAM-SHA-512", "alice", "alice-secret")
    final = client.evaluate_challenge(server.evaluate(client.initial_response()))
    server.evaluate(final)
    with pytest.raises(SaslException, match="Invalid server signature"):
        client.evaluate_challenge(b"v=" + base64.b64encode(b"\x00" * 64))
    client = ScramSaslClient("SCRAM-SHA-512", "alice", "pw", nonce="mine")
    client.initial_response()
    with pytest.raises(SaslException, match="does not start with client nonce"):
        client.evaluate_challenge(b"r=theirs,s=AAAA,i=4096")
    client = ScramSaslClient("SCRAM-SHA-512", "alice", "pw", nonce="mine")
    client.initial_response()
    with pytest.raises(
        SaslException, match="Requested iterations 10 is less than the minimum 4096"
    ):
        client.evaluate_challenge(b"r=mine1,s=AAAA,i=10")
    client = ScramSaslClient("SCRAM-SHA-256", "alice", "pw", nonce="mine")
    client.initial_response()
    client.evaluate_challenge(b"r=mine1,s=AAAA,i=4096")
    with pytest.raises(SaslException, match="failed with error: invalid-proof"):
        client.evaluate_challenge(b"e=invalid-proof")


def test_sasl_name_encoding() -> None:
    assert sasl_name("a=b,c") == "a=3Db=2Cc"
    assert username_from_sasl_name("a=3Db=2Cc") == "a=b,c"
    with pytest.raises(ValueError, match="Invalid username"):
        username_from_sasl_name("a=4")


def test_scram_credentials_match_kafka(oracle) -> None:
    """Our StoredKey/ServerKey equal Kafka's ScramFormatter for the same password and salt."""
    oracle.require_kafka()
    for mechanism in SCRAM:
        for password in ("alice-secret", "pässwörd ☃", ""):
            salt = b"0123456789abcdef"
            cred = scram_credential(mechanism, password or "x", iterations=4096, salt=salt)
            stored, server = oracle.ask("scram", mechanism, password or "x", salt, "4096").split(
                ","
            )
            assert base64.b64decode(stored) == cred.stored_key
            assert base64.b64decode(server) == cred.server_key


@pytest.mark.parametrize("mechanism", SCRAM)
@pytest.mark.parametrize(
    ("user", "password", "ok"),
    [("alice", "pw-ä", True), ("a=b,c", "x", True), ("alice", "wrong", False)],
)
def test_our_client_against_kafka_scram_server(oracle, mechanism, user, password, ok) -> None:
    """Our upstream SCRAM client logs in to Kafka's own ScramSaslServer."""
    from .conftest import JavaError

    oracle.require_kafka()
    oracle.ask("ssrv", mechanism, user, "pw-ä" if ok and user == "alice" else "x" if ok else "pw-ä")
    client = ScramSaslClient(mechanism, user, password)
    server_first = oracle.ask("sstep", client.initial_response())
    final = client.evaluate_challenge(server_first.encode())
    assert final is not None
    if not ok:
        with pytest.raises(JavaError, match="Invalid client credentials"):
            oracle.ask("sstep", final)
        return
    server_final, complete, authzid = oracle.ask("sstep", final).split("|")
    assert (complete, authzid) == ("complete", user)
    assert client.evaluate_challenge(server_final.encode()) is None and client.complete


# --- PLAIN ---------------------------------------------------------------------------------------


def test_plain_round_trip(store) -> None:
    server = create_server("PLAIN", credentials=store)
    assert server.evaluate(PlainSaslClient("alice", "alice-secret").initial_response()) == b""
    assert server.complete and server.authorization_id == "alice"
    with pytest.raises(SaslException, match="Unexpected challenge"):
        server.evaluate(b"\x00alice\x00alice-secret")


def test_plain_kafka_python_client(store) -> None:
    mech = SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="alice-secret")
    server = create_server("PLAIN", credentials=store)
    mech.receive(server.evaluate(mech.auth_bytes()))  # sends authzid == authcid
    assert mech.is_authenticated() and server.authorization_id == "alice"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\x00alice\x00wrong", "Authentication failed: Invalid username or password"),
        (b"\x00mallory\x00alice-secret", "Authentication failed: Invalid username or password"),
        (
            b"bob\x00alice\x00alice-secret",
            "Authentication failed: Client requested an authorization id that is different from username",
        ),
        (b"\x00\x00pw", "Authentication failed: username not specified"),
        (b"\x00alice\x00", "Authentication failed: password not specified"),
        (b"alice\x00pw", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"a\x00b\x00c\x00d", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"a\x00b\x00c\x00d\x00e", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
    ],
)
def test_plain_errors(store, token, message) -> None:
    server = create_server("PLAIN", credentials=store)
    with pytest.raises(SaslAuthenticationError) as e:
        server.evaluate(token)
    assert e.value.error_message("PLAIN") == message
    assert not server.complete
    with pytest.raises(RuntimeError):
        server.authorization_id  # noqa: B018


def test_plain_hash_is_salted() -> None:
    a, b = hash_plain_password("same"), hash_plain_password("same")
    assert a.salt != b.salt and a.hash != b.hash
    assert a.verify("same") and not a.verify("Same")
    assert PlainCredential.from_json(a.to_json()) == a


def test_create_client() -> None:
    assert create_client("PLAIN", "u", "p").initial_response() == b"\x00u\x00p"
    assert create_client("SCRAM-SHA-512", "u", "p").mechanism == "SCRAM-SHA-512"
    with pytest.raises(ValueError, match="unsupported upstream SASL mechanism"):
        create_client("GSSAPI", "u", "p")
    with pytest.raises(ValueError, match="unsupported SASL mechanism"):
        create_server("GSSAPI")
