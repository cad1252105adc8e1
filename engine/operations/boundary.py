"""The operations boundary: a database that cannot be reached becomes one refusal.

Inside the engine a lost connection is an ordinary exception (a worker parks the step and tries
again); at the front doors it must be an answer the caller can act on — "unavailable, nothing
changed, send it again" — so every operation is wrapped in `store_boundary`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from engine.store.unreachable import STORE_ERRORS, store_unreachable
from schemas.errors import Unavailable

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


def store_boundary(operation: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Run `operation` (a method of an operations class, which holds its `_runtime`); the
    database being unreachable raises `Unavailable(code="store_unavailable")` instead (the
    operation's own refusals pass). Before it returns, the change tokens of what it changed
    are replaced (`engine.coordination.invalidations`)."""

    @functools.wraps(operation)
    async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await operation(*args, **kwargs)
        except STORE_ERRORS as exc:
            if not store_unreachable(exc):
                raise
            logger.warning("%s: database unavailable: %s", operation.__qualname__, exc)
            raise Unavailable(
                "the database cannot be reached right now; send the request again later",
                code="store_unavailable",
            ) from exc
        finally:
            # The store's committed changes of rows other processes keep copies of are
            # announced on tasks: their tokens are replaced before the caller hears back.
            runtime = getattr(args[0], "_runtime", None) if args else None
            if runtime is not None:
                await runtime.invalidations.settled()

    return guarded
