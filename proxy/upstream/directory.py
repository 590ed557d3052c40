"""Upstream broker ids -> real addresses, and -> the proxy ports that stand for them.

One directory per proxy (per upstream cluster), shared by all connections: FindCoordinator
may name a broker on a connection that never saw Metadata. A port is bound synchronously the
first time a node id is seen, before the response naming it leaves the proxy, so a client that
connects at once finds a listening socket (the kernel queues it until the accept loop runs).

Ports are a function of the node id, never of the order brokers appear in: with
`--broker-ports FIRST-LAST` broker N gets FIRST + N when that is in the range, else
FIRST + (N mod the range's size). Every aclgate instance (and every restart, whichever brokers
are up) in front of one cluster therefore hands out the same port for the same broker, so a
client bootstrapped through one instance can be served by another behind a load balancer.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

log = logging.getLogger("aclgate.directory")

#: called with (node_id, listening socket) when a per-broker port has been bound
ListenerOpener = Callable[[int, socket.socket], None]


class NodeDirectory:
    def __init__(
        self,
        bind_host: str,
        client_host: str,
        fixed_ports: dict[int, int],
        port_range: tuple[int, int] | None,
        open_listener: ListenerOpener,
        reserved: set[int] | None = None,
        reuse_port: bool = False,
    ):
        self.bind_host = bind_host
        self.client_host = client_host
        self.fixed_ports = dict(fixed_ports)
        self.port_range = port_range
        self.open_listener = open_listener
        #: SO_REUSEPORT on every port: several workers serve it (proxy/process/workers.py)
        self.reuse_port = reuse_port
        self.reserved = set(reserved or ()) | set(self.fixed_ports.values())
        self.upstream: dict[int, tuple[str, int]] = {}
        self.proxy_ports: dict[int, int] = {}
        self._unmappable_logged: set[int] = set()
        #: changes whenever an address or a port changes: caches of rewritten answers key on it
        self.generation = 0

    # BrokerDirectory protocol -------------------------------------------------------

    def learn(self, node_id: int, host: str, port: int) -> None:
        previous = self.upstream.get(node_id)
        if previous != (host, port):
            self.upstream[node_id] = (host, port)
            self.generation += 1
            if previous is not None:
                log.info("broker %d moved from %s:%d to %s:%d", node_id, *previous, host, port)

    def advertise(self, node_id: int) -> tuple[str, int] | None:
        port = self.proxy_ports.get(node_id)
        if port is None:
            port = self._bind(node_id)
            if port is None:
                return None
        return self.client_host, port

    # ------------------------------------------------------------------------------

    def upstream_address(self, node_id: int) -> tuple[str, int] | None:
        return self.upstream.get(node_id)

    def open_fixed(self) -> None:
        """Bind every explicitly mapped port at start-up (fail fast on a port conflict)."""
        for node_id in sorted(self.fixed_ports):
            if node_id not in self.proxy_ports and self._bind(node_id) is None:
                raise OSError(f"cannot bind port {self.fixed_ports[node_id]} for broker {node_id}")

    def _bind(self, node_id: int) -> int | None:
        fixed = self.fixed_ports.get(node_id)
        if fixed is not None:
            candidates = [fixed]
        elif self.port_range is not None:
            candidates = [port_for_node(node_id, self.port_range)]
            taken = [n for n, p in self.proxy_ports.items() if p == candidates[0]]
            if taken or candidates[0] in self.reserved:
                self._unmappable(
                    node_id,
                    f"its port {candidates[0]} in --broker-ports is taken"
                    + (f" by broker {taken[0]}" if taken else " (the --listen or a --node-port)"),
                )
                return None
        else:
            candidates = [0]  # an ephemeral port chosen by the OS
        for port in candidates:
            sock = self._listen(port)
            if sock is None:
                continue
            bound = sock.getsockname()[1]
            self.proxy_ports[node_id] = bound
            self.reserved.add(bound)
            self.generation += 1
            log.info("broker %d is served on port %d", node_id, bound)
            self.open_listener(node_id, sock)
            return bound
        self._unmappable(node_id, f"port {candidates[0]} cannot be bound")
        return None

    def _unmappable(self, node_id: int, why: str) -> None:
        if node_id not in self._unmappable_logged:
            self._unmappable_logged.add(node_id)
            log.error(
                "no port for broker %d (%s; fixed map %s, range %s): it is hidden from "
                "clients; add --node-port %d=PORT or choose another --broker-ports range",
                node_id,
                why,
                self.fixed_ports,
                self.port_range,
                node_id,
            )

    def _listen(self, port: int) -> socket.socket | None:
        family = socket.AF_INET6 if ":" in self.bind_host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self.reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((self.bind_host, port))
            sock.listen(1024)
            sock.setblocking(False)
        except OSError as exc:
            log.debug("port %d unavailable: %s", port, exc)
            sock.close()
            return None
        return sock


def port_for_node(node_id: int, port_range: tuple[int, int]) -> int:
    """The proxy port of broker `node_id` in `port_range`: the same on every instance."""
    lo, hi = port_range
    size = hi - lo + 1
    return lo + node_id if node_id < size else lo + node_id % size
