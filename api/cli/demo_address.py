"""Where the demo downstream listens when `serve --demo` or `run --demo-downstream` starts it.

The example files call it at `EXAMPLES_URL`; each command publishes them with that replaced
by the URL of the one it started. A fixed port would collide with another process, so it is
the port the latest published versions already call (an earlier start on this database left
them there), when that port is free: the documents are then the same as those published, and
publishing them again creates no new version. Otherwise a free port, saying so.

Light on purpose: both commands import it at start-up, and the demo downstream (aiohttp) and
the operations layer are imported only when a command starts one (tests/unit/test_cli_startup).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING

from api.cli import usage

if TYPE_CHECKING:
    from engine.runtime import Runtime

EXAMPLES_URL = "http://127.0.0.1:8765"
"""Where the example files call the demo downstream (replaced when they are published)."""

_LOOPBACK_PORT = re.compile(r"http://127\.0\.0\.1:(\d{1,5})\b")

console = usage.stderr()


async def remembered_port(runtime: Runtime, names: Iterable[str]) -> int | None:
    """The loopback port the latest published version of the first of the workflows `names`
    that has one calls (where an earlier start on this database put the demo downstream), or
    None: none is published, or none calls loopback."""
    from engine.operations import Operations
    from schemas.errors import NotFound

    workflows = Operations(runtime).workflows
    for name in names:
        try:
            latest = await workflows.get(name)
        except NotFound:
            continue
        found = _LOOPBACK_PORT.search(json.dumps(latest.document))
        if found and 0 < int(found.group(1)) < 65536:
            return int(found.group(1))
    return None


@contextlib.asynccontextmanager
async def started(preferred: int | None, what: str) -> AsyncIterator[str]:
    """The shipped demo downstream on loopback, and its URL: on `preferred` (the port the
    published `what` — "examples", "workflows" — already call) when it is free, so that they
    keep their versions and the versions a user derived from them keep reaching it; else on a
    free port (never a fixed one: another process may hold it), saying what that means."""
    from demo.downstream import start_downstream

    downstream = None
    if preferred is not None:
        try:
            downstream = await start_downstream(port=preferred)
        except OSError:
            downstream = None
    if downstream is None:
        downstream = await start_downstream(port=0)
        if preferred is not None:
            console.print(
                f"[yellow]demo downstream:[/yellow] port {preferred}, where the published "
                f"{what} call it, is taken; it listens on {downstream.url} instead. The "
                f"{what} get new versions calling there; versions of your own that call "
                f"127.0.0.1:{preferred} need the new address."
            )
    try:
        yield downstream.url
    finally:
        await downstream.stop()


@contextlib.asynccontextmanager
async def on_port(port: int, refuse: Callable[[str], Exception]) -> AsyncIterator[str]:
    """The demo downstream on the `--demo-port` given (0: a free one), and its URL: a port
    taken is the user's to change, so it is refused (`refuse(message)` is raised), never moved."""
    from demo.downstream import start_downstream

    try:
        downstream = await start_downstream(port=port)
    except OSError as error:
        raise refuse(
            f"cannot start the demo downstream on 127.0.0.1:{port}: "
            f"{error.strerror or error}; pick another with --demo-port (0: a free one)"
        ) from None
    try:
        yield downstream.url
    finally:
        await downstream.stop()
