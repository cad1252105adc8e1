"""The web run monitor: static files (HTML, CSS, ES modules; no build step) that
`api.rest.ui` serves at `/ui`. They talk to the REST API only (docs/architecture.md, 'Web run
monitor')."""

from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent / "static"
"""The monitor's files: `index.html` and what it loads."""
