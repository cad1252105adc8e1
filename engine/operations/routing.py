"""Which version a submission's run gets (docs/architecture.md, 'Versions and deployments').

A request that names a version gets it. Otherwise the workflow's routing row decides (one
primary-key read per submission, `Store.serving`): the serving version, unless a deployment is
running and the run's place falls inside the candidate's weight. A run's place is a hash of
the deployment's id and the run's idempotency key (its id when it has none), spread over
[0, 100): the same key always lands on the same side, so a client's retry of a request meets
the same version, and since the place does not depend on the stage, raising the weight only
adds keys to the candidate's side, never moves one back. Salting with the deployment's id
gives every deployment its own sample of keys.
"""

from __future__ import annotations

import hashlib

from engine.store.models import RunRoute
from engine.store.records import ServingRecord

PLACES = 1_000_000
"""Resolution of a run's place: a millionth of a percent point is far below any weight."""


def place(deployment_id: str, sticky_key: str) -> float:
    """Where `sticky_key` falls in [0, 100) for the deployment (stable, uniform)."""
    digest = hashlib.sha256(f"{deployment_id}\x00{sticky_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % PLACES * 100 / PLACES


def choose(serving: ServingRecord, sticky_key: str) -> tuple[int, RunRoute]:
    """(version, route) of a submission that names no version."""
    candidate = serving.candidate_version
    if (
        candidate is not None
        and serving.deployment_id is not None
        and serving.candidate_weight > 0
        and place(serving.deployment_id, sticky_key) < serving.candidate_weight
    ):
        return candidate, RunRoute.CANDIDATE
    return serving.serving_version, RunRoute.SERVING
