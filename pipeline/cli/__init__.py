"""`aclgate report|advise|whatif|audit-sample`: argument parsing and the session lifecycle."""
