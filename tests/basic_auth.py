"""The `Authorization: Basic` token an HTTP client sends for a URL's `user:password@`: the
tests' own computation of it (Latin-1, as aiohttp's `BasicAuth` encodes), to compare what a
downstream received with, and to look for in what a run recorded."""

from __future__ import annotations

import base64


def basic_credential(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode("latin-1")).decode("ascii")
