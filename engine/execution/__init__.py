"""Executing claimed steps: the worker loop, the executor and the admission guard."""
