"""Protecting destinations and tenants: AIMD admission, caps, breakers, rate limits."""
