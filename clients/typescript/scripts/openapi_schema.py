"""Print the OpenAPI schema the service publishes at ``/schema/openapi.json``, built in-process.

The app is created with default settings and is never started, so no database, Redis or model is
needed: the schema depends only on the handlers' types and the settings' limits. ``servers`` is left
out (it names where a deployment runs, not what the API is). Run from the repository root:
``.venv/bin/python clients/typescript/scripts/openapi_schema.py > openapi.json``.
"""

from __future__ import annotations

import json
import sys

from service.app import create_app
from service.runtime import Endpoints
from service.settings import Settings


def main() -> None:
    unused = Endpoints(owner_dsn=None, app_dsn="postgresql://unused", redis_url="redis://unused")
    schema = create_app(Settings(), unused).openapi_schema.to_schema()
    schema.pop("servers", None)
    json.dump(schema, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
