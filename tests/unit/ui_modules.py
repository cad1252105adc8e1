"""The web monitor's JavaScript modules run in Node, for the unit tests of their pure functions
(tests/unit/test_ui_waits.py, tests/unit/test_ui_format.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import ui

NODE = shutil.which("node")
"""None on a machine without Node.js: the tests that need it are skipped."""


def module_value(module: str, expression: str) -> Any:
    """The value of `expression` as JSON, with the exports of ui/static/js/`module` in scope
    as `m`."""
    uri = (ui.STATIC_DIR / "js" / module).as_uri()
    script = f"import * as m from {json.dumps(uri)};\nconsole.log(JSON.stringify({expression}));"
    assert NODE is not None
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", script],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return json.loads(done.stdout)
