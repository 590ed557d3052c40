"""aclgate, a Kafka-protocol authorizing proxy.

The design card keeps the code in top-level folders (`proxy/`, `protocol/`, `authz/`,
`certs/`, `pipeline/`); they install and import as `aclgate.proxy`, `aclgate.protocol`, ...
(pyproject.toml maps them with setuptools' `package-dir`; in a checkout the symbolic links
in this folder do the same), so aclgate never claims a top-level name such as `aclgate.protocol`.
"""

__version__ = "0.1.0"
