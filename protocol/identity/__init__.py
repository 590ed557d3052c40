"""Who a connection is: the principal from TLS, SASL or neither, the client's host, and the
PROXY protocol header that carries the host through a load balancer (docs/identity.md)."""
