"""`schemabridge destinations …` and `tenants …` as an operator runs them (real subprocesses on
the embedded store): the commands added with the operations layer, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.test_cli_run import sb


def test_a_cap_is_removed_and_a_bad_key_refused(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"
    assert sb("destinations", "set-cap", "erp", "--max-concurrency", "3", db=db).returncode == 0
    listed = json.loads(sb("destinations", "list", db=db).stdout)
    assert [(d["destination"], d["cap"], d["capConfigured"]) for d in listed] == [("erp", 3, True)]

    removed = sb("destinations", "remove-cap", "erp", db=db)
    assert removed.returncode == 0, removed.stderr
    assert "erp: cap removed; the default cap (100) applies" in removed.stdout
    assert json.loads(sb("destinations", "show", db=db).stdout)["configuredCaps"] == []

    bad = sb("destinations", "set-cap", "127.0.0.1:8765/", "--max-concurrency", "3", db=db)
    assert bad.returncode == 2
    assert "can never match a call" in bad.stderr and "'http://127.0.0.1:8765'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_quota_is_reset_and_tenants_are_listed(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"
    assert sb("tenants", "set-quota", "acme", "10", db=db).returncode == 0
    assert sb("tenants", "set-rate", "acme", "120", db=db).returncode == 0
    shown = json.loads(sb("tenants", "show", "acme", db=db).stdout)
    assert shown["quota"] == {"maxRuns": 10, "usedRuns": 0, "runsLeft": 10}
    assert (shown["rate"]["perMinute"], shown["rate"]["configured"]) == (120, True)
    assert [t["tenantId"] for t in json.loads(sb("tenants", "list", db=db).stdout)] == ["acme"]

    reset = sb("tenants", "reset-quota", "acme", db=db)
    assert reset.returncode == 0, reset.stderr
    assert "tenant acme: quota removed; runs are unlimited" in reset.stdout
    assert json.loads(sb("tenants", "show", "acme", db=db).stdout)["quota"] is None

    blank = sb("tenants", "set-quota", " ", "5", db=db)
    assert blank.returncode == 2 and "tenant id" in blank.stderr
