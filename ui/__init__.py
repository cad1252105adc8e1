"""The web run monitor: static files served by the API."""
