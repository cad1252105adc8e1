"""The schema check reads the shipped revisions from the migrations' file names, without
Alembic (`engine.store.db.known_revisions`): the names must say what Alembic's chain says."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from engine.store import db


def test_the_file_names_give_alembics_revisions_and_head() -> None:
    script = ScriptDirectory.from_config(db.alembic_config())
    assert db.known_revisions() == {r.revision for r in script.walk_revisions()}
    assert db.head_revision() == script.get_current_head()


def test_every_migration_file_is_named_by_its_revision_after_the_one_before() -> None:
    script = ScriptDirectory.from_config(db.alembic_config())
    for revision in script.walk_revisions():
        name = revision.path.rsplit("/", 1)[-1]
        assert name.startswith(f"{revision.revision}_"), (name, revision.revision)
        number = int(revision.revision)
        if number == 1:
            assert revision.down_revision is None
        else:
            assert revision.down_revision == f"{number - 1:04d}", name


def test_only_migrations_and_the_package_marker_are_in_versions() -> None:
    # A file named otherwise would be a migration the schema check cannot see.
    names = {e.name for e in (db.MIGRATIONS / "versions").iterdir() if e.name.endswith(".py")}
    unnamed = {n for n in names if n != "__init__.py" and not db._REVISION_FILE.match(n)}
    assert unnamed == set()
