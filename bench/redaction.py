"""What the redactor costs a step that uses secrets: one `scrub` of a ~1 KB output holding
none of them, and one holding two, with 2 secrets and with 50 (timeit, best of 5).

    python -m bench.redaction
"""

from __future__ import annotations

import json
import random
import string
import timeit
from typing import Any

from schemas.redaction import Redactor

SECRETS = ['cnry_Q9v+Zt=Kx.7Lw~pA/é"x', "correct horse/battery staple"]
ROUNDS, CALLS = 5, 2_000


def main() -> None:
    rng = random.Random(1)
    alphabet = string.ascii_letters + string.digits + "/+="
    many = SECRETS + ["".join(rng.choice(alphabet) for _ in range(32)) for _ in range(48)]
    body: dict[str, Any] = {
        "items": [{"id": i, "note": "lorem ipsum dolor sit amet " * 2} for i in range(12)]
    }
    holding = {**body, "echo": SECRETS[0], "pw": SECRETS[1]}
    for label, values in (("2 secrets", SECRETS), ("50 secrets", many)):
        redactor = Redactor(values)
        for name, output in (("holding none", body), ("holding two", holding)):
            timer = timeit.Timer(lambda r=redactor, o=output: r.scrub(o))
            best = min(timer.repeat(number=CALLS, repeat=ROUNDS))
            size = len(json.dumps(output))
            print(f"{label}: scrub of a {size} B output {name}: {best / CALLS * 1e6:.1f} µs")


if __name__ == "__main__":
    main()
