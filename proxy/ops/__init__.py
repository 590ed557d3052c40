"""What operators see: health and metrics over HTTP, metric merging across workers, log helpers and rate limits."""
