"""Named SQL queries, one file per query (``<feature>/<name>.sql``); installed as ``service._sql``."""
