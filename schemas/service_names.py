"""What a service's name may be: it names the service's health marker file (under
`SCHEMABRIDGE_HEALTH_DIR`), its heartbeat and its log lines, so it must be a plain file name that
cannot leave that directory."""

from __future__ import annotations

import re

_SERVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def service_name_problem(name: str) -> str | None:
    """Why `name` cannot name a service, or None when it can."""
    if _SERVICE_NAME.fullmatch(name):
        return None
    return (
        f"service name {name!r} cannot name a health marker file; use letters, digits, '.', "
        "'_' or '-' (at most 128 characters, not starting with '.')"
    )
