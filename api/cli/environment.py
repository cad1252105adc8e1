"""The settings of a command that reads them, with its environment checked first.

A `SCHEMABRIDGE_` variable that is no setting's name is otherwise ignored in silence: a worker
given `SCHEMABRIDGE_DATABSE_URL` used the default SQLite file beside the shared Redis, and
reported healthy. `load_settings` refuses a name that is a likely misspelling of a setting
(one line naming both, exit 2) and warns once, on stderr, about any other. Names starting
`SCHEMABRIDGE_TEST_` are the test suite's own and pass (`engine.settings.TEST_ENV_PREFIX`);
bare names (`TIMEOUT_PROCESS_MS`) are not looked at, as any program may use them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from api.cli import usage

if TYPE_CHECKING:
    from engine.settings import Settings

CLI_ENV_NAMES = frozenset(
    {
        "SCHEMABRIDGE_API_URL",
        "SCHEMABRIDGE_API_KEY",
        "SCHEMABRIDGE_LOG_FORMAT",
        "SCHEMABRIDGE_ACCESS_LOG",
    }
)
"""Variables the command line reads itself, beside the settings (`engine.settings`)."""

_warned: set[str] = set()
"""The unknown names this process has warned about already (a command may read the settings
more than once, and one warning a name is enough)."""


def check_environment(environ: Mapping[str, str]) -> None:
    """Refuse (exit 2, one line) a `SCHEMABRIDGE_` name close to a known one; warn once about
    any other unknown one."""
    from engine.settings import setting_env_names, unknown_env_names

    unknown = unknown_env_names(environ, setting_env_names() | CLI_ENV_NAMES)
    misspelt = [(name, known) for name, known in unknown if known is not None]
    if misspelt:
        raise usage.fail(
            "; ".join(f"unknown setting {name}: did you mean {known}?" for name, known in misspelt)
        )
    console = usage.stderr()
    for name, _ in unknown:
        if name not in _warned:
            _warned.add(name)
            console.print(
                f"[yellow]warning:[/yellow] {name} is not a setting; ignored (the settings are "
                "listed in the README; SCHEMABRIDGE_TEST_* is left to the tests)",
                markup=True,
            )


def load_settings() -> Settings:
    """`Settings` from the environment, once `check_environment` passed it. A value a setting
    refuses raises as `Settings` does; `api.cli.main` says it in one line, exit 2."""
    from engine.settings import Settings

    check_environment(os.environ)
    return Settings()
