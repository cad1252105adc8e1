"""Which REST API the command line calls: its URL and key. Apart from the transport
(`api.cli.session`, httpx) so that the commands' options can name the default without loading
an HTTP client that `--help` does not need."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_API_URL = "http://127.0.0.1:8000"
"""Where `schemabridge serve` and `schemabridge api` listen by default."""
DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ApiTarget:
    """Which API to call and with which key (sent as `Authorization: Bearer`)."""

    url: str = DEFAULT_API_URL
    key: str | None = None
