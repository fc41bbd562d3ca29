"""The head revision read from the migration files without Alembic is Alembic's own."""

from __future__ import annotations

from service.db import migrate


def test_the_files_head_is_alembics_head() -> None:
    assert migrate.file_head() is not None
    assert (migrate.file_head(),) == migrate.heads()
