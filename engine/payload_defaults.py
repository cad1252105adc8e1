"""The payload store's defaults, in one place: `Settings` offers them as settings and the
worker and executor fall back on them when built without settings (tests, benchmarks)."""

from __future__ import annotations

PAYLOAD_HIGH_WATER_BYTES = 512 * 1024 * 1024
"""Payload-store size above which spawners park until it drains: 512 MiB."""
PAYLOAD_RETENTION_S = 7 * 24 * 3600.0
"""How long a run's payloads outlive its end: 7 days."""
MERGE_OUTPUTS_READ_MAX_BYTES = 64 * 1024 * 1024
"""Largest MERGE output list a step's expressions may load from the payload store: 64 MiB."""
