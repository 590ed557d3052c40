"""The process: worker processes and their supervisor, and GC tuning."""
