"""TLS contexts on a loopback echo server: mTLS modes, expired/untrusted certs, reload."""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest
from cryptography import x509

from aclgate.certs import pki
from aclgate.protocol.identity.principal import principal_for_connection
from aclgate.protocol.identity.sslmapping import SslPrincipalMapper
from aclgate.proxy.security.tls import (
    ReloadingTlsContext,
    TlsConfigError,
    build_client_context,
    build_server_context,
    peer_certificate,
    validate_server_files,
)

MAPPER = SslPrincipalMapper.from_rules("DEFAULT")


class Result:
    def __init__(self) -> None:
        self.peer: bytes | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()


def echo_server(ctx_for_connection, connections: int = 1):
    """Serve `connections` TLS connections on 127.0.0.1 (each echoes one message)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    results = [Result() for _ in range(connections)]

    def handle(raw: socket.socket, result: Result) -> None:
        try:
            raw.settimeout(10)
            with ctx_for_connection().wrap_socket(raw, server_side=True) as tls:
                result.peer = peer_certificate(tls)
                data = tls.recv(100)
                tls.sendall(data)
        except (OSError, ssl.SSLError) as e:
            result.error = e
        finally:
            result.done.set()

    def serve() -> None:
        for result in results:  # one thread per connection: a held connection blocks nothing
            try:
                raw, _ = listener.accept()
            except OSError as e:
                result.error = e
                result.done.set()
                continue
            threading.Thread(target=handle, args=(raw, result), daemon=True).start()
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1], results


def connect(port: int, ctx: ssl.SSLContext, hostname: str = "localhost") -> bytes:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=hostname) as tls,
    ):
        tls.sendall(b"ping")
        data = tls.recv(100)
        if not data:
            raise ConnectionError("closed by the server")
        return tls.getpeercert(binary_form=True) or b""


def client_ctx(d: Path, cert: str | None = None, **kw) -> ssl.SSLContext:
    return build_client_context(
        d / "ca.crt",
        d / f"{cert}.crt" if cert else None,
        d / f"{cert}.key" if cert else None,
        **kw,
    )


def server_ctx(d: Path, client_auth: str) -> ssl.SSLContext:
    return build_server_context(d / "server.crt", d / "server.key", d / "ca.crt", client_auth)


@pytest.mark.parametrize(
    ("client_auth", "cert", "principal"),
    [
        ("required", "alice", "User:CN=alice,OU=eng,O=example"),
        ("requested", "alice", "User:CN=alice,OU=eng,O=example"),
        ("requested", None, "User:ANONYMOUS"),
        ("none", "alice", "User:ANONYMOUS"),
        ("none", None, "User:ANONYMOUS"),
    ],
)
def test_client_auth_modes(pki_dir, client_auth, cert, principal) -> None:
    ctx = server_ctx(pki_dir, client_auth)
    port, (result,) = echo_server(lambda: ctx)
    connect(port, client_ctx(pki_dir, cert))
    assert result.done.wait(10) and result.error is None
    assert principal_for_connection("SSL", result.peer, MAPPER) == principal


@pytest.mark.parametrize(
    ("client_auth", "cert"),
    [
        ("required", None),
        ("required", "expired"),
        ("requested", "expired"),
        ("required", "stranger"),
    ],
)
def test_refused_client_certs(pki_dir, tmp_path, client_auth, cert) -> None:
    d = pki_dir
    if cert == "stranger":  # signed by another CA
        pki.create_ca(tmp_path)
        pki.issue_client(tmp_path, "stranger", "CN=stranger")
        cctx = build_client_context(
            d / "ca.crt", tmp_path / "stranger.crt", tmp_path / "stranger.key"
        )
    else:
        cctx = client_ctx(d, cert)
    ctx = server_ctx(d, client_auth)
    port, (result,) = echo_server(lambda: ctx)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        connect(port, cctx)
    assert result.done.wait(10)
    assert isinstance(result.error, ssl.SSLError)
    if cert == "expired":
        assert "expired" in str(result.error)


def test_client_context_checks_the_server(pki_dir, tmp_path) -> None:
    ctx = server_ctx(pki_dir, "none")
    port, results = echo_server(lambda: ctx, connections=3)
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        connect(port, client_ctx(pki_dir), hostname="kafka.example")
    connect(port, client_ctx(pki_dir, check_hostname=False), hostname="kafka.example")
    pki.create_ca(tmp_path)
    with pytest.raises(ssl.SSLCertVerificationError):
        connect(port, build_client_context(tmp_path / "ca.crt"))
    for r in results:
        assert r.done.wait(10)


def test_tls_versions(pki_dir) -> None:
    ctx = server_ctx(pki_dir, "none")
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert client_ctx(pki_dir).minimum_version == ssl.TLSVersion.TLSv1_2


def test_file_validation(pki_dir, tmp_path, caplog) -> None:
    d = pki_dir
    with pytest.raises(TlsConfigError, match="does not match the certificate"):
        build_server_context(d / "server.crt", d / "alice.key")
    with pytest.raises(TlsConfigError, match="cannot read certificate file"):
        build_server_context(tmp_path / "missing.crt", d / "server.key")
    (tmp_path / "garbage.crt").write_text("hello")
    with pytest.raises(TlsConfigError, match="holds no PEM or DER certificate"):
        build_server_context(tmp_path / "garbage.crt", d / "server.key")
    with pytest.raises(TlsConfigError, match="holds no usable PEM private key"):
        build_server_context(d / "server.crt", d / "server.crt")
    with pytest.raises(TlsConfigError, match="needs a CA file"):
        build_server_context(d / "server.crt", d / "server.key", None, "required")
    with pytest.raises(TlsConfigError, match="client auth must be one of"):
        build_server_context(d / "server.crt", d / "server.key", d / "ca.crt", "want")
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key((d / "server.key").read_bytes(), None)
    enc = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw"),
    )
    (tmp_path / "enc.key").write_bytes(enc)
    with pytest.raises(TlsConfigError, match="encrypted"):
        build_server_context(d / "server.crt", tmp_path / "enc.key")
    build_server_context(d / "server.crt", tmp_path / "enc.key", password=b"pw")
    # an expired certificate still loads (the operator may be mid-rotation) but is reported
    assert validate_server_files(d / "expired.crt", d / "expired.key")[0].startswith(
        f"certificate {d / 'expired.crt'}"
    )
    with caplog.at_level(logging.WARNING):
        build_server_context(d / "expired.crt", d / "expired.key")
    assert "expired on" in caplog.text


def _serial(der: bytes) -> int:
    return x509.load_der_x509_certificate(der).serial_number


def _touch_later(*paths: Path) -> None:
    future = time.time() + 5
    for p in paths:
        os.utime(p, (future, future))


@pytest.mark.parametrize("mode", ["current", "front"])
def test_reload(pki_dir, tmp_path, caplog, mode) -> None:
    d = tmp_path
    for name in ("ca.crt", "ca.key", "server.crt", "server.key", "alice.crt", "alice.key"):
        (d / name).write_bytes((pki_dir / name).read_bytes())
    reloading = ReloadingTlsContext(
        d / "server.crt", d / "server.key", d / "ca.crt", "required", check_interval=0
    )
    provider = (
        reloading.current if mode == "current" else (lambda ctx=reloading.front_context(): ctx)
    )
    port, results = echo_server(provider, connections=4)
    cctx = client_ctx(d, "alice")
    first = _serial(connect(port, cctx))

    # an established connection survives the reload
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    held = cctx.wrap_socket(raw, server_hostname="localhost")
    held_serial = _serial(held.getpeercert(binary_form=True))

    pki.issue_server(d, dns=["localhost"], ips=["127.0.0.1"], force=True)
    _touch_later(d / "server.crt", d / "server.key")
    assert reloading.check()
    second = _serial(connect(port, cctx))
    assert second != first and reloading.reloads == 1

    held.sendall(b"still here")
    assert held.recv(100) == b"still here" and held_serial == first
    held.close()

    # a broken new file keeps the previous context in service
    (d / "server.crt").write_text("-----BEGIN CERTIFICATE-----\nbroken\n")
    _touch_later(d / "server.crt")
    with caplog.at_level(logging.ERROR):
        assert not reloading.check()
    assert "TLS reload failed, keeping the previous certificate" in caplog.text
    assert reloading.failures == 1
    assert _serial(connect(port, cctx)) == second
    for r in results:
        assert r.done.wait(10) and r.error is None


def test_reload_check_interval(pki_dir) -> None:
    now = [0.0]
    r = ReloadingTlsContext(
        pki_dir / "server.crt", pki_dir / "server.key", check_interval=5, clock=lambda: now[0]
    )
    ctx = r.current()
    now[0] = 4.9
    assert r.current() is ctx
    now[0] = 5.0
    assert r.current() is ctx  # nothing changed on disk: same context


def test_first_build_errors_propagate(tmp_path) -> None:
    with pytest.raises(TlsConfigError):
        ReloadingTlsContext(tmp_path / "nope.crt", tmp_path / "nope.key")
