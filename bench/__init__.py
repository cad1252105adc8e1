"""Benchmarks: scripts anyone can run; results in bench/RESULTS.md."""
