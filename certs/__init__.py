"""Development PKI: a CA plus server and client certificates for TLS and mTLS tests and demos."""
