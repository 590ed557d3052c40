"""PySpark jobs over aclgate's audit log: reports, least-privilege advice, what-if simulation."""
