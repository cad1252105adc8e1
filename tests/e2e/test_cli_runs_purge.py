"""`schemabridge runs purge` as an operator runs it (real subprocesses on a SQLite file): a dry
run counts, a purge deletes in batches and says what went, and every refusal is one line with
its exit code (docs/architecture.md, 'Run retention')."""

from __future__ import annotations

import asyncio
import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest

from engine.runtime import Runtime
from engine.settings import Settings
from engine.store.audit import AuditFilter, AuditRecord
from tests.conftest import Backend
from tests.e2e.cli_harness import assert_refused
from tests.e2e.rest_harness import CLI_HERE, SCHEMABRIDGE, process_env, schemabridge, upgraded
from tests.integration.tree_harness import plant_tree, rows_left

DAY_S = 86_400.0


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    backend = Backend("embedded", f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}", None)
    return upgraded(process_env(backend, tmp_path))


def plant(env: dict[str, str]) -> dict[str, str]:
    """Trees ended 40 days ago (1,200 children, 1 child, none) and one ended now."""

    async def planting() -> dict[str, str]:
        runtime = await Runtime.open(Settings(database_url=env["SCHEMABRIDGE_DATABASE_URL"]))
        try:
            old = time.time() - 40 * DAY_S
            roots = {
                f"old{n}": await plant_tree(runtime, at=old, ended_at=old, children=n)
                for n in (1200, 1, 0)
            }
            now = time.time()
            roots["new"] = await plant_tree(runtime, at=now, ended_at=now, children=3)
            return roots
        finally:
            await runtime.close()

    return asyncio.run(planting())


def left(env: dict[str, str], root: str) -> int:
    async def counting() -> int:
        runtime = await Runtime.open(Settings(database_url=env["SCHEMABRIDGE_DATABASE_URL"]))
        try:
            return (await rows_left(runtime, root))["runs"]
        finally:
            await runtime.close()

    return asyncio.run(counting())


def purge_events(env: dict[str, str]) -> list[AuditRecord]:
    async def reading() -> list[AuditRecord]:
        runtime = await Runtime.open(Settings(database_url=env["SCHEMABRIDGE_DATABASE_URL"]))
        try:
            wanted = AuditFilter(action="runs.purged")
            return await runtime.store.audit_page(wanted, before_id=None, limit=10)
        finally:
            await runtime.close()

    return asyncio.run(reading())


def test_a_dry_run_counts_and_a_purge_deletes_the_trees_ended_before(env: dict[str, str]) -> None:
    roots = plant(env)
    dry = schemabridge(env, "runs", "purge", "--ended-before", "30d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith(
        "would delete 1,204 runs (3 roots, 1,201 children), 2,408 steps, 1,204 log lines, "
        "3 payload chunks of runs ended before "
    )
    # It names the database it read: the other `runs` commands call the API instead.
    assert dry.stdout.rstrip().endswith(f"(database {env['SCHEMABRIDGE_DATABASE_URL']})")
    assert left(env, roots["old1200"]) == 1201  # a dry run deletes nothing

    done = schemabridge(env, "runs", "purge", "--ended-before", "30d", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("deleted 1,204 runs (3 roots, 1,201 children), 2,408 steps")
    assert [left(env, roots[name]) for name in ("old1200", "old1", "old0", "new")] == [0, 0, 0, 4]
    (event,) = purge_events(env)  # recorded in the audit trail, with what went
    assert (event.actor, event.subject_kind) == (CLI_HERE, "runs")
    assert (event.detail["roots"], event.detail["children"]) == (3, 1201)
    again = schemabridge(env, "runs", "purge", "--ended-before", "30d", "-y")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("nothing to delete: no run tree ended before ")
    assert again.stdout.rstrip().endswith(f"(database {env['SCHEMABRIDGE_DATABASE_URL']})")


def test_a_moment_that_is_no_past_time_is_refused_in_one_line(env: dict[str, str]) -> None:
    assert_refused(
        schemabridge(env, "runs", "purge", "--ended-before", "yesterday"),
        2,
        "--ended-before 'yesterday' is neither a span",
    )
    assert_refused(
        schemabridge(env, "runs", "purge", "--ended-before", "2999-01-01"),
        2,
        "is still to come: give a span back from now (30d) or a past time",
    )
    for far in ("9999999999d", "0001-01-01", "9999-12-31T23:59-14:00"):  # no date to say
        assert_refused(
            schemabridge(env, "runs", "purge", "--ended-before", far),
            2,
            f"--ended-before {far!r} is out of range: give a span back from now (30d) or a past",
        )
    none = Path(env["SCHEMABRIDGE_HEALTH_DIR"]).parent / "none.db"
    missing = dict(env, SCHEMABRIDGE_DATABASE_URL=f"sqlite+aiosqlite:///{none}")
    assert_refused(
        schemabridge(missing, "runs", "purge", "--ended-before", "30d", "--yes"),
        2,
        "there is no such file",
    )


def test_a_purge_without_yes_is_refused_off_a_terminal_and_asked_in_one(
    env: dict[str, str],
) -> None:
    """A deletion for good is asked for twice: a script (no terminal) must say --yes, and a
    terminal is asked, after being told what would go; "no" deletes nothing (exit 1)."""
    roots = plant(env)
    assert_refused(
        schemabridge(env, "runs", "purge", "--ended-before", "30d"),
        2,
        "runs purge deletes for good: add --yes to delete the runs ended before '30d' "
        "without asking, or --dry-run to count them first",
    )
    assert left(env, roots["old1200"]) == 1201
    said, code = _in_a_terminal(env, ["runs", "purge", "--ended-before", "30d"], "n\n")
    assert "would delete 1,204 runs (3 roots, 1,201 children)" in said, said
    assert "Delete them for good? [y/N]" in said and "nothing deleted" in said, said
    assert code == 1
    assert left(env, roots["old1200"]) == 1201
    said, code = _in_a_terminal(env, ["runs", "purge", "--ended-before", "30d"], "y\n")
    assert code == 0 and "deleted 1,204 runs (3 roots, 1,201 children)" in said, said
    assert left(env, roots["old1200"]) == 0


def _in_a_terminal(env: dict[str, str], args: list[str], answer: str) -> tuple[str, int]:
    """`schemabridge ARGS` (the installed script) on a pseudo-terminal, `answer` typed once it
    asks; everything it wrote there, and its exit code."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [SCHEMABRIDGE, *args],
        env=env,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        start_new_session=True,
    )
    os.close(follower)
    said = b""
    deadline = time.monotonic() + 120
    answered = False
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the terminal closed: the command ended
                    break
                if not chunk:
                    break
                said += chunk
            if not answered and b"[y/N]" in said:
                os.write(leader, answer.encode())
                answered = True
            if process.poll() is not None and not ready:
                break
        return said.decode("utf-8", "replace"), process.wait(timeout=30)
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
