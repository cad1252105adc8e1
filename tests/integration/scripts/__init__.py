"""Helpers for the integration tests: backend clients, condition waits, a tiny service script."""
