"""How many runs one batch retry considers: the bound the operations layer enforces, and the
default that `POST /runs/retry`, `POST /runs/retry/preview` and `schemabridge runs retry`
(with its `--dry-run`) all take when no `limit` is given. Defined here, the one package the
operations layer, the REST API and the CLI all import, so a preview with no `limit` counts
the runs the batch with no `limit` takes."""

from __future__ import annotations

MAX_BATCH = 10_000
"""The most runs one batch retry considers (`limit` may not exceed it)."""
DEFAULT_BATCH = 1_000
"""The runs a batch retry, and its preview, consider when no `limit` is given: one
transaction of at most this many retries unless the caller asks for more."""
