"""TLS contexts for client listeners and upstream connections, with certificate reload.

Files are checked with `cryptography` before OpenSSL sees them so that mistakes get a clear
message (which file, what is wrong) instead of an OpenSSL error code. `ReloadingTlsContext`
rebuilds the server context when the certificate, key or CA files change on disk: new
connections get the new context, established ones keep theirs, and a broken new file leaves
the old context in service (with an error in the log) rather than taking the listener down.

`serve_tls` accepts client connections itself so that a failed TLS handshake is seen: uvloop's
own TLS server drops such a connection without telling the application.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import errno
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from aclgate.files import file_signature

__all__ = [
    "CLIENT_AUTH_MODES",
    "HANDSHAKE_TIMEOUT",
    "FileFollowingContext",
    "ReloadingTlsContext",
    "TlsConfigError",
    "build_client_context",
    "build_server_context",
    "describe_handshake_error",
    "peer_certificate",
    "serve_tls",
    "validate_server_files",
]

log = logging.getLogger("aclgate.tls")

CLIENT_AUTH_MODES = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


class TlsConfigError(Exception):
    """A certificate, key or CA file is unusable; the message names the file and the reason."""


def _read(path: str | os.PathLike[str], what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise TlsConfigError(f"cannot read {what} {path}: {e.strerror or e}") from None


def _load_certs(path: str | os.PathLike[str], what: str) -> list[x509.Certificate]:
    data = _read(path, what)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        try:
            certs = [x509.load_der_x509_certificate(data)]
        except ValueError:
            raise TlsConfigError(f"{what} {path} holds no PEM or DER certificate") from None
    return certs


def _public_bytes(key: object) -> bytes:
    return key.public_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def validate_server_files(
    certfile: str | os.PathLike[str],
    keyfile: str | os.PathLike[str],
    cafile: str | os.PathLike[str] | None = None,
    *,
    password: bytes | None = None,
    now: dt.datetime | None = None,
) -> list[str]:
    """Check that the files load and the key belongs to the certificate; return warnings
    (expired or not yet valid certificate). Raises TlsConfigError for unusable files."""
    now = now or dt.datetime.now(dt.UTC)
    chain = _load_certs(certfile, "certificate file")
    leaf = chain[0]
    key_data = _read(keyfile, "key file")
    try:
        key = serialization.load_pem_private_key(key_data, password=password)
    except TypeError:
        raise TlsConfigError(f"key file {keyfile} is encrypted; a password is needed") from None
    except ValueError as e:
        raise TlsConfigError(f"key file {keyfile} holds no usable PEM private key ({e})") from None
    if not isinstance(
        key,
        rsa.RSAPrivateKey
        | ec.EllipticCurvePrivateKey
        | ed25519.Ed25519PrivateKey
        | ed448.Ed448PrivateKey,
    ):
        raise TlsConfigError(f"key file {keyfile}: unsupported key type {type(key).__name__}")
    if _public_bytes(key.public_key()) != _public_bytes(leaf.public_key()):
        raise TlsConfigError(f"key file {keyfile} does not match the certificate in {certfile}")
    warnings = []
    subject = leaf.subject.rfc4514_string()
    if leaf.not_valid_after_utc <= now:
        warnings.append(
            f"certificate {certfile} ({subject}) expired on {leaf.not_valid_after_utc:%Y-%m-%d %H:%M:%S}Z"
        )
    if leaf.not_valid_before_utc > now:
        warnings.append(
            f"certificate {certfile} ({subject}) is not valid before {leaf.not_valid_before_utc:%Y-%m-%d %H:%M:%S}Z"
        )
    if cafile is not None:
        _load_certs(cafile, "CA file")
    return warnings


def build_server_context(
    certfile: str | os.PathLike[str],
    keyfile: str | os.PathLike[str],
    cafile: str | os.PathLike[str] | None = None,
    client_auth: str = "none",
    *,
    password: bytes | None = None,
) -> ssl.SSLContext:
    """A server context (TLS 1.2+) for a client listener.

    `client_auth` is Kafka's `ssl.client.auth`: none, requested (a certificate is asked for and
    verified if sent) or required. requested/required need `cafile`, the CAs trusted for
    client certificates.
    """
    if client_auth not in CLIENT_AUTH_MODES:
        raise TlsConfigError(
            f"client auth must be one of {', '.join(CLIENT_AUTH_MODES)}, not {client_auth!r}"
        )
    if client_auth != "none" and cafile is None:
        raise TlsConfigError(
            f"client auth {client_auth!r} needs a CA file to verify client certificates"
        )
    for warning in validate_server_files(certfile, keyfile, cafile, password=password):
        log.warning("%s", warning)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(certfile, keyfile, password=password)
        if cafile is not None:
            ctx.load_verify_locations(cafile=cafile)
    except (ssl.SSLError, OSError) as e:
        raise TlsConfigError(f"OpenSSL refused {certfile}/{keyfile}/{cafile}: {e}") from None
    ctx.verify_mode = CLIENT_AUTH_MODES[client_auth]
    return ctx


def build_client_context(
    cafile: str | os.PathLike[str] | None = None,
    certfile: str | os.PathLike[str] | None = None,
    keyfile: str | os.PathLike[str] | None = None,
    *,
    check_hostname: bool = True,
    password: bytes | None = None,
) -> ssl.SSLContext:
    """A client context (TLS 1.2+) for upstream connections: server verified against `cafile`
    (or the system CAs), optional client certificate for mTLS upstream.

    `check_hostname=False` mirrors Kafka's empty `ssl.endpoint.identification.algorithm`.
    """
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = check_hostname
    try:
        if cafile is not None:
            _load_certs(cafile, "CA file")
            ctx.load_verify_locations(cafile=cafile)
        if certfile is not None:
            for warning in validate_server_files(certfile, keyfile or certfile, password=password):
                log.warning("%s", warning)
            ctx.load_cert_chain(certfile, keyfile, password=password)
    except (ssl.SSLError, OSError) as e:
        raise TlsConfigError(f"OpenSSL refused the upstream TLS files: {e}") from None
    return ctx


def peer_certificate(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> bytes | None:
    """The verified client certificate (DER) or None: feed it to principal_for_connection."""
    if ssl_object is None:
        return None
    return ssl_object.getpeercert(binary_form=True)


class FileFollowingContext:
    """An SSLContext that follows its files: `current()` rebuilds it first if a file's
    mtime/size/inode changed (checked at most every `check_interval` seconds). A file that
    cannot be loaded keeps the previous context in service, logged and counted once."""

    def __init__(
        self,
        files: Sequence[str | os.PathLike[str] | None],
        build: Callable[[], ssl.SSLContext],
        *,
        failed: str,
        reloaded: str,
        check_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        on_reload: Callable[[ssl.SSLContext], None] | None = None,
    ) -> None:
        self._files = tuple(f for f in files if f is not None)
        self._build = build
        #: log messages: "<failed>: <error>", "<reloaded>"
        self._failed, self._reloaded = failed, reloaded
        self._interval = check_interval
        self._clock = clock
        self._on_reload = on_reload
        self._lock = threading.Lock()
        self._stamp = self._read_stamp()
        self._context = build()  # the first build must succeed: errors propagate
        self._checked = clock()
        self.reloads = 0
        self.failures = 0

    def _read_stamp(self) -> tuple[tuple[int, ...] | None, ...]:
        out: list[tuple[int, ...] | None] = []
        for f in self._files:
            try:
                out.append(file_signature(f))
            except OSError:
                out.append(None)
        return tuple(out)

    def current(self) -> ssl.SSLContext:
        now = self._clock()
        if self._files and now - self._checked >= self._interval:
            self.check(now)
        return self._context

    def check(self, now: float | None = None) -> bool:
        """Rebuild if a file changed; True if a new context is now in service."""
        with self._lock:
            self._checked = self._clock() if now is None else now
            stamp = self._read_stamp()
            if stamp == self._stamp:
                return False
            self._stamp = stamp  # a broken file is reported once, not on every connection
            try:
                context = self._build()
            except TlsConfigError as e:
                self.failures += 1
                log.error("%s: %s", self._failed, e)
                return False
            self._context = context
            self.reloads += 1
        log.info("%s", self._reloaded)
        if self._on_reload is not None:
            self._on_reload(context)
        return True


class ReloadingTlsContext(FileFollowingContext):
    """The listener's server context, following its certificate, key and CA files.

    For listeners whose SSLContext is fixed at creation (asyncio.start_server(ssl=...)), pass
    `front_context()` instead of `current()`: its SNI callback switches each new handshake to
    `current()`.
    """

    def __init__(
        self,
        certfile: str | os.PathLike[str],
        keyfile: str | os.PathLike[str],
        cafile: str | os.PathLike[str] | None = None,
        client_auth: str = "none",
        *,
        password: bytes | None = None,
        check_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        on_reload: Callable[[ssl.SSLContext], None] | None = None,
    ) -> None:
        super().__init__(
            (certfile, keyfile, cafile),
            lambda: build_server_context(certfile, keyfile, cafile, client_auth, password=password),
            failed="TLS reload failed, keeping the previous certificate",
            reloaded=f"TLS certificate reloaded from {certfile}",
            check_interval=check_interval,
            clock=clock,
            on_reload=on_reload,
        )
        self._front: ssl.SSLContext | None = None

    def front_context(self) -> ssl.SSLContext:
        """A context whose handshakes are switched to `current()` by its SNI callback."""
        if self._front is None:
            front = self._build()

            def switch(ssl_obj: ssl.SSLObject, _name: str | None, _ctx: ssl.SSLContext) -> None:
                ctx = self.current()
                if ctx is not ssl_obj.context:
                    ssl_obj.context = ctx
                return None

            front.sni_callback = switch
            self._front = front
        return self._front


# ------------------------------------------------------------------ accepting TLS clients

#: seconds a client's TLS handshake may take: a half-done handshake must not hold a socket
HANDSHAKE_TIMEOUT = 10.0

#: OpenSSL's reasons when the first bytes are not a TLS record at all
_NOT_TLS = {"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST", "UNKNOWN_PROTOCOL"}


def describe_handshake_error(exc: BaseException) -> str:
    """The SSL error as OpenSSL names it, with a hint when the client did not speak TLS."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, ssl.SSLError) and exc.reason in _NOT_TLS:
        return f"{text} (not TLS: a client configured for PLAINTEXT or SASL_PLAINTEXT?)"
    return text


def _peer(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(address) or "?"


async def serve_tls(
    sock: socket.socket,
    factory: Callable[[], asyncio.Protocol],
    context: ssl.SSLContext,
    *,
    handshake_timeout: Callable[[], float],
    on_failed: Callable[[str, BaseException], None],
    on_accept_error: Callable[[OSError], None],
) -> None:
    """Accept on `sock` until cancelled and hand each socket to the event loop with TLS.

    uvloop's `create_server(ssl=...)` drops a connection whose handshake fails (plaintext,
    garbage, a refused client certificate, a timeout) without a word to the application:
    the protocol never sees it. Awaiting `connect_accepted_socket` gets the error, which goes
    to `on_failed(peer, exc)`. An established connection gets the same TLS transport and
    protocol as with create_server: nothing changes once the handshake is done.
    """
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    pending: set[asyncio.Task] = set()
    try:
        while True:
            try:
                conn, address = await loop.sock_accept(sock)
            except OSError as exc:
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EINTR):
                    continue  # the client gave up before it was accepted
                # out of file descriptors or memory: what is open keeps being served, new
                # clients wait in the backlog until something closes
                on_accept_error(exc)
                await asyncio.sleep(0.1)
                continue
            task = loop.create_task(
                _handshake(
                    loop, conn, _peer(address), factory, context, handshake_timeout(), on_failed
                )
            )
            pending.add(task)
            task.add_done_callback(pending.discard)
    finally:
        for task in pending:
            task.cancel()


async def _handshake(
    loop: asyncio.AbstractEventLoop,
    conn: socket.socket,
    peer: str,
    factory: Callable[[], asyncio.Protocol],
    context: ssl.SSLContext,
    timeout: float,
    on_failed: Callable[[str, BaseException], None],
) -> None:
    try:
        await loop.connect_accepted_socket(
            factory, conn, ssl=context, ssl_handshake_timeout=timeout
        )
    except (ssl.SSLError, ConnectionAbortedError) as exc:  # the timeout is ConnectionAbortedError
        on_failed(peer, exc)
        conn.close()
    except OSError as exc:  # reset by the peer mid-handshake: nothing to report
        log.debug("TLS handshake with %s ended: %r", peer, exc)
        conn.close()
    except asyncio.CancelledError:
        conn.close()
        raise
