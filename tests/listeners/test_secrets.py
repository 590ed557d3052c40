"""No secret leaves the proxy: neither the audit file nor any log line (DEBUG included) holds
a password or a bearer token, whether the login succeeded or failed; nor does the users file."""

from __future__ import annotations

import logging
import time

from confluent_kafka import Producer

from aclgate.proxy.security.usersfile import add_user
from tests.fixtures.rawclient import RawClient
from tests.listeners.util import (
    AUDIENCE,
    ISSUER,
    acl,
    read_audit,
    sasl_login,
    sign_jwt,
    unique,
    write_acls,
)

OURS = ("aclgate", "proxy", "protocol", "authz", "certs", "asyncio", "root")


def test_no_password_or_token_in_audit_or_logs(tansu, proxy_factory, jwks_file, tmp_path, caplog):
    secret = "Tr0ub4dor&3-" + unique("pw")
    wrong = "hunter2-" + unique("pw")
    users = tmp_path / "users.json"
    add_user(users, "carol", secret, ["PLAIN", "SCRAM-SHA-512"])
    assert secret not in users.read_text()

    token = sign_jwt("carol")
    expired = sign_jwt("carol", lifetime=-600)
    topic = unique("secrets")
    audit = tmp_path / "audit.jsonl"
    caplog.set_level(logging.DEBUG)
    proxy = proxy_factory(
        tansu.bootstrap,
        listener_security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms="PLAIN,SCRAM-SHA-512,OAUTHBEARER",
        users_file=users,
        sasl_oauthbearer_jwks_file=jwks_file,
        sasl_oauthbearer_expected_audience=[AUDIENCE],
        sasl_oauthbearer_expected_issuer=ISSUER,
        connection_failed_authentication_delay_ms=10,
        allow_everyone_if_no_acl_found=False,
        acl_file=write_acls(tmp_path / "acls.json", acl("User:carol", "DESCRIBE", topic)),
        audit_file=audit,
    )
    base = {"bootstrap.servers": proxy.bootstrap, "security.protocol": "SASL_PLAINTEXT"}
    for mechanism in ("PLAIN", "SCRAM-SHA-512"):
        for password in (secret, wrong):  # allowed and denied writes, failed logins
            producer = Producer(
                {
                    **base,
                    "sasl.mechanism": mechanism,
                    "sasl.username": "carol",
                    "sasl.password": password,
                    "message.timeout.ms": 1500,
                }
            )
            producer.produce(topic, b"x")
            producer.flush(3)
    for jwt in (token, expired):
        producer = Producer(
            {
                **base,
                "sasl.mechanism": "OAUTHBEARER",
                "oauth_cb": lambda _cfg, jwt=jwt: (jwt, time.time() + 3600),
                "message.timeout.ms": 1500,
            }
        )
        producer.produce(topic, b"x")
        producer.flush(3)
    for mechanism, password in [("PLAIN", wrong), ("SCRAM-SHA-512", wrong), ("PLAIN", secret)]:
        with RawClient(proxy.bootstrap) as raw:
            sasl_login(raw, mechanism, "carol", password)
    with RawClient(proxy.bootstrap) as raw:
        sasl_login(raw, "OAUTHBEARER", "", expired)

    events = read_audit(proxy, audit)
    assert {e["principal"] for e in events} == {"User:carol"}  # the logins did happen
    proxy.stop()

    text = audit.read_text()
    # the proxy's records, formatted with exception text and arguments
    lines = [logging.Formatter().format(r) for r in caplog.records if r.name.split(".")[0] in OURS]
    assert any("authenticated as User:carol" in line for line in lines), "no DEBUG log captured"
    assert any("SASL authentication failed" in line for line in lines)
    for needle in (secret, wrong, token, expired, token.split(".")[2], expired.split(".")[2]):
        assert needle not in text
        leaked = [line for line in lines if needle in line]
        assert not leaked, leaked
