"""Benchmarks: scripts anyone can run; results in bench/RESULTS.md.

Every benchmark's downstream listens on loopback (nothing else may be a target here), which
the egress policy refuses by default: importing this package admits loopback for the
benchmark and every process it starts, unless the environment already says otherwise.
"""

import os

from vertices.egress import ALLOW_ENV, LOOPBACK_ALLOW

os.environ.setdefault(ALLOW_ENV, LOOPBACK_ALLOW)
