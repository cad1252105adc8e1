"""What the worker's metrics add to every GATEWAY attempt, in µs (timeit, best of 7).

    python -m bench.worker_metrics

Each figure is given twice: the process's CPU time (`time.process_time`), the cost itself
even on a machine other processes keep busy, and the wall clock (`time.perf_counter`), which
on such a machine also counts the time the process waited for a CPU.

Timed, in this process, with no I/O:

- `attempt`: `WorkerMetrics.attempt` as `AdmissionGuard.after_attempt` calls it for each
  attempt (one cached dict lookup, one counter `inc`, one histogram `observe`), for a 2xx
  answer to one of 50 destinations (every child of a fan-out takes this path);
- `refused`: the same for an attempt admission refused (an `inc` only);
- `labels() every time`: what resolving the label children on each attempt would cost
  instead (`Counter.labels(...).inc()` + `Histogram.labels(...).observe()`), for comparison;
- `steps, per step`: `WorkerMetrics.steps_finished` for a flush of 500 steps, divided by 500.
"""

from __future__ import annotations

import time
import timeit
from collections.abc import Callable

from engine.execution.admission_guard import REFUSED
from engine.execution.worker_metrics import WorkerMetrics

NUMBER = 200_000
REPEAT = 7
DESTINATIONS = [f"https://api-{i}.example.com:443" for i in range(50)]
BATCH = [("GATEWAY", "succeeded")] * 480 + [("GATEWAY", "failed")] * 10 + [("MERGE", "parked")] * 10


def _best_us(
    statement: Callable[[], object], timer: Callable[[], float], number: int = NUMBER
) -> float:
    times = timeit.repeat(statement, number=number, repeat=REPEAT, timer=timer)
    return min(times) / number * 1e6


def _row(name: str, statement: Callable[[], object], number: int = NUMBER, per: int = 1) -> str:
    cpu = _best_us(statement, time.process_time, number) / per
    wall = _best_us(statement, time.perf_counter, number) / per
    return f"| {name} | {cpu:.2f} | {wall:.2f} |"


def main() -> None:
    metrics = WorkerMetrics()
    for destination in DESTINATIONS:  # warm: the children are resolved once per destination
        metrics.attempt(destination, 200, None, 0.01)
        metrics.attempt(destination, None, REFUSED, 0.0)
    one = DESTINATIONS[17]

    def attempt() -> None:
        metrics.attempt(one, 200, None, 0.042)

    def refused() -> None:
        metrics.attempt(one, None, REFUSED, 0.0)

    def uncached() -> None:
        metrics.attempts.labels(one, "2xx").inc()
        metrics.attempt_seconds.labels(one).observe(0.042)

    def steps() -> None:
        metrics.steps_finished(BATCH)

    print("| per-attempt work | µs CPU | µs wall |\n| --- | ---: | ---: |")
    print(_row("attempt (2xx: inc + observe)", attempt))
    print(_row("refused (inc)", refused))
    print(_row("labels() every time (inc + observe)", uncached))
    print(_row("steps, per step (flush of 500)", steps, number=2_000, per=len(BATCH)))


if __name__ == "__main__":
    main()
