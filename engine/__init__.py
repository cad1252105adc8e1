"""Run semantics: validation, the durable store, claims and leases, scheduling, workers."""
