"""Lua scripts compiled once on the embedded Redis, as a Redis server does.

fakeredis runs every `EVAL`/`EVALSHA` by handing the script's source to lupa, which compiles
it again on each call: for the admission exchange (~25 KB of Lua with its libraries) that was
~250 µs a call, 6 % of the embedded default's CPU per fan-out child. A Redis server compiles a
script once and keeps the function; `compile_scripts_once` makes the embedded server do the
same by wrapping the server's one Lua runtime, so the scripts' behaviour, replies and errors
stay fakeredis's own.

It relies on one detail of fakeredis (`FakeServer._lua_runtime`, where fakeredis keeps the
runtime it creates on first use). A fakeredis without it runs scripts as before, only slower;
tests/integration/test_embedded_scripts.py fails if that detail changes.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import fakeredis

logger = logging.getLogger(__name__)

COMPILED_SCRIPTS_KEPT = 256
"""Distinct script sources kept compiled (least recently used dropped): ours are a handful;
the bound is for a caller that builds scripts on the fly."""


class CompilingRuntime:
    """A lupa `LuaRuntime` whose `execute` compiles each distinct source once.

    fakeredis calls `execute(source)` for a script and for its clean-up; everything else
    (tables, globals) goes to the runtime itself. As on a Redis server, a script's chunk is one
    function kept between calls: its locals are new on each call, but a script that changes
    the chunk itself (`setfenv`) would change it for later calls too; ours do not.
    """

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.compiled = functools.lru_cache(maxsize=COMPILED_SCRIPTS_KEPT)(runtime.compile)

    def execute(self, source: bytes | str) -> Any:
        try:
            chunk = self.compiled(source)
        except Exception:  # lupa's syntax error, of whichever Lua version fakeredis loaded
            # Nothing has run: let the runtime raise its own error, worded as fakeredis expects.
            return self.runtime.execute(source)
        return chunk()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runtime, name)


def compile_scripts_once(server: fakeredis.FakeServer) -> CompilingRuntime | None:
    """Make `server` compile each Lua script once; returns the wrapped runtime, or None when
    it cannot (this fakeredis keeps its runtime elsewhere, or has no Lua): scripts then run as
    fakeredis runs them, and nothing else changes. The caller serialises calls per server."""
    try:
        current = getattr(server, "_lua_runtime", None)
        if current is None:  # fakeredis creates the runtime on a server's first script
            fakeredis.FakeRedis(server=server).eval("return 0", 0)
            current = getattr(server, "_lua_runtime", None)
        if isinstance(current, CompilingRuntime):
            return current
        if current is None:
            raise LookupError("fakeredis keeps no _lua_runtime")
        wrapped = CompilingRuntime(current)
    except Exception as error:  # an optimisation only: never what stops a server starting
        logger.warning("embedded Redis scripts will compile on every call: %s", error)
        return None
    server._lua_runtime = wrapped  # type: ignore[attr-defined]
    return wrapped
