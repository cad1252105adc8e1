"""Why inputSchema patterns are matched by RE2: the time one input takes to check against a
catastrophic pattern, with Python's `re` (what jsonschema uses) and with the validator
SchemaBridge uses (engine.validation.patterns, RE2); and what the input checks cost on large
inputs (the run input's size and depth, a request body's depth, a GATEWAY answer's depth).

    .venv/bin/python -m bench.regex_patterns [--max-re-s 2]

Pattern `^(a+)+$`, input `"a" * n + "!"` (no match: the backtracking engine tries every way to
split the a's). `re` is measured for growing n until one check takes longer than `--max-re-s`
(each further character doubles it); RE2 for the same n and for n up to the input limit.
Times are CPU (process time), each RE2 figure the median of 5 runs. Then the input checks,
median of 5: the run input limits (`check_input_limits`) on an input of the default limit's
size, and the body depth check on a body of the default body limit (10 MiB), beside
FastAPI's own parse of that body. Then a GATEWAY's JSON answer (`parse_body`: depth check and
parse) beside `json.loads` of it alone: a typical 200-byte answer (µs, best of 5 x 100,000)
and 1 MiB answers (median of 5). Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import time
import timeit
from collections.abc import Callable

from api.rest.body_depth import _too_deep_at
from engine.operations.submission import check_input_limits
from engine.validation.patterns import input_validator
from vertices.gateway_response import Answer, parse_body

PATTERN = "^(a+)+$"


def _seconds(check: Callable[[], object], runs: int = 1) -> float:
    """Median CPU seconds of `check` (process time: the machine is shared)."""
    times = []
    for _ in range(runs):
        started = time.process_time()
        check()
        times.append(time.process_time() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-re-s", type=float, default=2.0)
    args = parser.parse_args()
    schema = {"type": "string", "pattern": PATTERN}
    validator = input_validator(schema)
    backtracking = re.compile(PATTERN)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}")
    print()
    print("| n | Python `re` (jsonschema's default) | RE2 (SchemaBridge) |")
    print("| ---: | ---: | ---: |")
    n = 16
    while True:
        text = "a" * n + "!"
        re_s = _seconds(lambda text=text: backtracking.search(text))
        re2_s = _seconds(lambda text=text: list(validator.iter_errors(text)), runs=5)
        print(f"| {n} | {re_s * 1000:,.1f} ms | {re2_s * 1e6:,.0f} µs |")
        if re_s > args.max_re_s:
            break
        n += 2
    last = n
    for n in (10_000, 262_000):  # the last one fills the default 256 KiB input
        text = "a" * n + "!"
        re2_s = _seconds(lambda text=text: list(validator.iter_errors(text)), runs=5)
        print(f"| {n:,} | 2^{n - last:,} times the row n = {last} | {re2_s * 1e6:,.0f} µs |")
    _input_checks()
    _gateway_answers()


def _input_checks() -> None:
    records = [{"id": i, "name": f"item-{i}", "tags": ["a", "b"]} for i in range(5_500)]
    run_input = {"items": records}  # about 250 KB as compact JSON
    limits = {"max_bytes": 256 * 1024, "max_depth": 64}
    input_s = _seconds(lambda: check_input_limits(run_input, **limits), runs=5)
    objects = (b'{"id": %d, "tags": ["a", "b"]}' % i for i in range(300_000))
    body = b"[" + b",".join(objects) + b"]"  # about 10 MB: the default body limit
    body_s = _seconds(lambda: _too_deep_at(body, 64), runs=5)
    parse_s = _seconds(lambda: json.loads(body), runs=5)
    print()
    print("| check (CPU) | input | median |")
    print("| --- | --- | ---: |")
    size = len(str(run_input))
    print(f"| run input size and depth | {size:,} B, 5,500 objects | {input_s * 1000:.1f} ms |")
    print(f"| request body depth | {len(body):,} B, 300,000 objects | {body_s * 1000:.0f} ms |")
    print(f"| (FastAPI's own `json.loads` of it) | the same | {parse_s * 1000:.0f} ms |")


TYPICAL_ANSWER = {
    "id": "cus_8f3a2b",
    "status": "active",
    "plan": {"name": "pro", "seats": 12},
    "tags": ["billing", "eu"],
    "balance": 1234.5,
    "updatedAt": "2026-03-01T12:00:00Z",
    "ok": True,
    "region": "eu-west-1",
}
"""About 200 bytes as JSON: what a fan-out child's GATEWAY typically gets back."""


def _best(check: Callable[[], object], rounds: int) -> float:
    """Best CPU seconds per call of `check`, over 5 repeats of `rounds` calls."""
    timer = timeit.Timer(check, timer=time.process_time)
    return min(timer.repeat(number=rounds, repeat=5)) / rounds


def _gateway_answers() -> None:
    def answer(value: object) -> tuple[Answer, str]:
        text = json.dumps(value)
        json_type = {"content-type": "application/json"}
        return Answer(200, "OK", json_type, text.encode(), None), text

    typical, typical_text = answer(TYPICAL_ANSWER)
    rounds = 100_000
    checked = _best(lambda: parse_body(typical), rounds)
    parsed = _best(lambda: json.loads(typical_text), rounds)
    print()
    print("| GATEWAY answer (CPU) | `parse_body` | `json.loads` alone |")
    print("| --- | ---: | ---: |")
    print(f"| typical, {len(typical_text)} B | {checked * 1e6:.2f} µs | {parsed * 1e6:.2f} µs |")
    records = [{"id": i, "name": f"item-{i}", "tags": ["a", "b"]} for i in range(20_000)]
    wide_deep = [json.loads("[" * 60 + "]" * 60) for _ in range(8_000)]  # 61 levels throughout
    cases = (("20,000 records", {"items": records}), ("8,000 lists 61 deep", wide_deep))
    for label, value in cases:
        large, text = answer(value)
        checked = _seconds(lambda large=large: parse_body(large), runs=5)
        parsed = _seconds(lambda text=text: json.loads(text), runs=5)
        size = f"{len(text):,} B"
        print(f"| {label}, {size} | {checked * 1000:.0f} ms | {parsed * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
