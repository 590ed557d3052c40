"""The proxy's side towards the cluster: connections, KIP-368 re-authentication of its login, and the broker directory behind address rewriting."""
