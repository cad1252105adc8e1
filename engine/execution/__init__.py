"""Executing claimed steps: the worker loop, the executor, the step rules, the admission guard
and the fan-out's port onto the store."""
