"""Take admission slots on a Redis server and hang until killed (a worker dying mid-call).

python -m tests.integration.scripts.hold_slots REDIS_URL DESTINATION SLOTS LEASE_S
"""

from __future__ import annotations

import asyncio
import sys

from redis.asyncio import Redis

from admission import Admission, DestinationCaps
from schemas.clock import SystemClock


async def main(url: str, destination: str, slots: int, lease_s: float) -> None:
    admission = Admission(Redis.from_url(url), SystemClock())
    await admission.set_caps(destination, DestinationCaps(max_concurrency=slots))
    for _ in range(slots):
        await admission.admit(destination, "t", wait_timeout_s=0, lease_s=lease_s)
    print("held", flush=True)
    await asyncio.Event().wait()  # never settled: only SIGKILL ends this


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
