"""Data: loading a source, splitting it over clients, and caching the shards."""
