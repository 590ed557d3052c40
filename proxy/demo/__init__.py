"""`aclgate demo` / `make run`: an embedded broker and a demo client."""
