"""A fan-out's progress reads its waiting and running children from small indexes, never the
step of every child (at 100,000 children the join over every child's step was most of a
`GET /runs/{id}`: bench/results-api.md, 'The fan-out progress of GET /runs/{id}'); a run
list reads its page's start overs from a partial index, never every run.

SQLite decides from the query's shape alone, so its plan is checked here; PostgreSQL chooses
by its statistics (the benchmark shows its plan at 100,000 children)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Select, text
from sqlalchemy.dialects import sqlite

from engine.store import children, db, restarts


async def _plan(database: Path, statement: Select[object]) -> list[str]:
    sql = str(statement.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}))
    engines = db.create_engines(f"sqlite+aiosqlite:///{database}")
    try:
        await db.upgrade(engines)
        async with engines.read.connect() as conn:
            rows = (await conn.execute(text(f"EXPLAIN QUERY PLAN {sql}"))).all()
    finally:
        await engines.dispose()
    return [str(row[3]) for row in rows]


async def test_waiting_children_read_the_waiting_steps_index(tmp_path: Path) -> None:
    plan = await _plan(tmp_path / "sb.db", children.waiting_children_statement("parent", 0.0))
    assert any("INDEX ix_step_waiting" in line for line in plan), plan
    assert any("INDEX ix_run_parent_status_item" in line for line in plan), plan
    assert not any(line.startswith("SCAN") for line in plan), plan


async def test_running_children_read_only_the_children_still_going(tmp_path: Path) -> None:
    plan = await _plan(tmp_path / "sb.db", children.running_children_statement("parent"))
    assert any(
        "INDEX ix_run_parent_status_item (parent_run_id=? AND status=?)" in line for line in plan
    ), plan
    # The joined rows are read once (`MATERIALIZE running`), then grouped and counted: only
    # that small CTE is scanned, never a table.
    assert sum(line.startswith("MATERIALIZE") for line in plan) == 1, plan
    assert all(line == "SCAN running" for line in plan if line.startswith("SCAN")), plan


async def test_a_pages_start_overs_are_read_from_the_restarted_from_index(
    tmp_path: Path,
) -> None:
    """A run list reads which of its page's runs were started over in one statement: a range
    of the partial index `ix_run_restarted_from` per run, never every run."""
    plan = await _plan(tmp_path / "sb.db", restarts.new_runs_statement(["a", "b"]))
    assert any("INDEX ix_run_restarted_from (restarted_from=?)" in line for line in plan), plan
    assert not any(line.startswith("SCAN") for line in plan), plan
