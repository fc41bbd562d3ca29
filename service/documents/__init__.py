"""Documents: line-anchored ingestion of files and trees, the index summary, and exact lookup modes.

The pure part (no database, no network):

* :mod:`service.documents.walk` — ``walk_tree``: the text files of a tree that git would track.
* :mod:`service.documents.languages` — extension (or ``#!`` line) → language, and per-language outlines
  (Python ``ast``, TOML/INI tables) of :mod:`~service.documents.sections`; Markdown headings through
  :mod:`service.documents.markdown`, other code through :mod:`service.documents.code_outline`
  (tree-sitter or a heuristic).
* :mod:`service.documents.chunking` — ``chunk_file``: L0 file summary, L1 section/symbol and L2
  size-bounded, line-anchored chunks that reproduce the file exactly.

The service part:

* :mod:`service.documents.ingest` — ``POST /v1/documents`` and ``DELETE``: validate, skip unchanged
  files, chunk, embed, replace a file's chunks in one transaction, bump the org's revision.
* :mod:`service.documents.index` — the listing and ``GET /v1/documents/index`` summary.
* :mod:`service.documents.lookup` — ``exact``/``path``/``symbol`` lookup over chunks (and ``nearest``).
* :mod:`service.documents.globs` — the ``path`` mode's globs compiled for SQL.
* :mod:`service.documents.handlers` — the Litestar controller.
* :mod:`service.documents.importer` — the client side of ``pgcontext import``.
"""

from service.documents.handlers import DocumentController
from service.documents.lookup import LOOKUP_MODES, LookupFilters, LookupHit, LookupMode, applicable_modes

# The mode functions stay in their module (``from service.documents import lookup`` then
# ``lookup.exact(...)``): re-exporting ``path``/``symbol`` here would shadow nothing useful and read badly.
__all__ = [
    "LOOKUP_MODES",
    "DocumentController",
    "LookupFilters",
    "LookupHit",
    "LookupMode",
    "applicable_modes",
]
