"""proxy/httpclient.py against a TLS server that answers with canned bytes: the body framings
identity providers use, and every way an answer can be unusable (HttpError, never a hang)."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from aclgate.certs import pki
from aclgate.proxy.httpclient import HttpError, check_https_url, https_context, request


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    root = tmp_path_factory.mktemp("http-pki")
    pki.create_ca(root)
    pki.issue_server(root, dns=["localhost"], ips=["127.0.0.1"])
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(root / "server.crt", root / "server.key")
    return server, root / "ca.crt"


def fetch(tls, answer: bytes | None, *, timeout: float = 2.0, max_bytes: int = 1 << 20, **kw):
    """Serve `answer` (None: never answer) once, and request it."""
    server_ctx, ca = tls
    seen: list[bytes] = []

    async def main():
        async def handle(reader, writer):
            seen.append(await reader.readuntil(b"\r\n\r\n"))
            if answer is None:
                await asyncio.sleep(30)
            writer.write(answer)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        try:
            return await request(
                f"https://localhost:{port}/jwks?x=1",
                ssl_context=https_context(kw.pop("cafile", ca)),
                timeout=timeout,
                max_bytes=max_bytes,
                **kw,
            )
        finally:
            server.close()

    return asyncio.run(main()), seen


def test_content_length(tls) -> None:
    answer, seen = fetch(tls, b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{"keys":[]}')
    assert (answer.status, answer.json()) == (200, {"keys": []})
    assert seen[0].startswith(b"GET /jwks?x=1 HTTP/1.1\r\nHost: localhost:")


def test_chunked(tls) -> None:
    body = b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\n{"a"\r\n3\r\n:1}\r\n0\r\n\r\n'
    answer, _ = fetch(tls, body)
    assert answer.json() == {"a": 1}


def test_read_to_close_and_post(tls) -> None:
    answer, seen = fetch(
        tls,
        b"HTTP/1.0 401 Unauthorized\r\n\r\n{}",
        method="POST",
        body=b"grant_type=client_credentials",
        headers={"Authorization": "Basic eDp5"},
    )
    assert answer.status == 401 and answer.body == b"{}"
    assert b"Content-Length: 29\r\n" in seen[0] and b"Authorization: Basic eDp5" in seen[0]


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n", "larger than 1000"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n" + b"x" * 2000, "larger"),
        (b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 2000, "larger than 1000"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{}", "IncompleteRead"),
        (None, "no answer within 0.3 s"),
    ],
)
def test_unusable_answers(tls, answer, match) -> None:
    with pytest.raises(HttpError, match=match):
        fetch(tls, answer, timeout=0.3, max_bytes=1000)


def test_untrusted_server(tls, tmp_path) -> None:
    pki.create_ca(tmp_path, common_name="someone else")
    with pytest.raises(HttpError, match="CERTIFICATE_VERIFY_FAILED"):
        fetch(tls, b"HTTP/1.1 200 OK\r\n\r\n", cafile=tmp_path / "ca.crt")


def test_only_https() -> None:
    with pytest.raises(ValueError, match="https://"):
        check_https_url("http://idp/jwks", "the JWKS URL")
    with pytest.raises(ValueError, match="https://"):
        check_https_url("https:///jwks", "the JWKS URL")
