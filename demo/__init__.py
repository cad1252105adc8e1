"""A demo downstream HTTP service the project ships for examples, tests and benchmarks."""
