"""TCP-level fuzzing of the running proxy (docs/fuzzing.md)."""
