"""The health marker file: `<health_dir>/<service>` exists exactly while the service is up.

Container health checks (`test -f .healthy/worker`) read it, so the contract is about the
file's existence only: created once the service has started, removed as the first step of a
graceful shutdown (before draining, so traffic stops arriving while in-flight work finishes;
docs/architecture.md, 'Health markers') and again on any exit path. The file holds the pid
for whoever looks at it by hand.

A process killed with SIGKILL leaves its marker behind; the heartbeat
(engine/coordination/heartbeat.py)
is the cross-machine liveness signal, the marker is only the local, container-level one.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

from engine.settings import Settings
from schemas.service_names import service_name_problem


class HealthMarker:
    """The marker file for one service; also a context manager (create on enter, remove on exit).

    `service` must be a plain file name (letters, digits, `.`, `_`, `-`; at most 128 chars) so
    that it cannot escape `health_dir`. `create` and `remove` are idempotent.
    """

    def __init__(self, service: str, health_dir: Path) -> None:
        problem = service_name_problem(service)
        if problem is not None:
            raise ValueError(problem)
        self.service = service
        self.path = health_dir / service

    @classmethod
    def from_settings(cls, service: str, settings: Settings) -> HealthMarker:
        """The marker for `service` under `settings.health_dir` (default `.healthy`)."""
        return cls(service, settings.health_dir)

    def create(self) -> None:
        """Create the marker (and its directory). Written to a temporary name then renamed, so
        a health check never sees a half-written file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.service}.{os.getpid()}.tmp")
        partial.write_text(f"{os.getpid()}\n", encoding="utf-8")
        os.replace(partial, self.path)

    def remove(self) -> None:
        """Remove the marker if it exists."""
        self.path.unlink(missing_ok=True)

    def exists(self) -> bool:
        return self.path.is_file()

    def __enter__(self) -> HealthMarker:
        self.create()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.remove()
