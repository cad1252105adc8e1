"""A reprocess's log line counts its children as every other count is said: one child, and
thousands with their separator (an on-call tour read "2001 dead-lettered children")."""

from __future__ import annotations

from engine.store import actions_store
from engine.store.recovery import Reprocessed


def test_a_reprocess_line_groups_its_count_and_agrees_with_it() -> None:
    many = actions_store._reprocess_message("key:ops", Reprocessed(revived=2_001))
    assert many == "reprocess by key:ops: 2,001 dead-lettered children run again"
    one = actions_store._reprocess_message("key:ops", Reprocessed(revived=1))
    assert one == "reprocess by key:ops: 1 dead-lettered child runs again"
