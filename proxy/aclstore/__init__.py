"""Where the proxy's ACLs live: the backend contract, the ACL file and its watcher, and (kafka/) the ordered ACL log in a Kafka topic shared by a fleet."""
