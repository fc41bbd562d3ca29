"""``pgcontext import PATH``: :func:`service.documents.importer.run_import` from the command line.

Besides the importer's own progress bar and summary, this command says what the service gave as the
reason of an error (``details.errors``: e.g. which parameter is invalid, and why) and, on Ctrl-C,
how many files were sent before it (those are unchanged on the next run and not sent again).
It follows the importer's requests through httpx response hooks on the client it hands it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console

from service.cli.answers import reason
from service.cli.transfer import INTERRUPTED, service_access
from service.documents.importer import ImportFailed, ImportOptions, ImportSummary, print_summary, run_import
from service.settings import Settings


@dataclass
class Watch:
    """What the importer's requests did, seen from their answers."""

    files: int = 0
    """Files the service accepted (created, updated or found unchanged)."""
    chunks: int = 0
    last_reason: str = ""
    """The reason of the last error answer (see :func:`service.cli.answers.reason`)."""
    reasons: dict[str, str] = field(default_factory=dict)
    """Per path, the reason a one-file ``POST /v1/documents`` was refused."""

    async def on_request(self, request: httpx.Request) -> None:
        self.last_reason = ""  # a failure without an answer (the connection) has no reason

    async def on_response(self, response: httpx.Response) -> None:
        request = response.request
        if response.status_code == 200 and request.method == "POST" and request.url.path == "/v1/documents":
            await response.aread()
            result = response.json()
            self.files += int(result["created"]) + int(result["updated"]) + int(result["unchanged"])
            self.chunks += int(result["chunks_written"])
        elif response.status_code >= 400:
            await response.aread()
            self.last_reason = reason(response)
            if self.last_reason and request.method == "POST" and request.url.path == "/v1/documents":
                files = json.loads(request.content).get("files") or []
                if len(files) == 1:
                    self.reasons[files[0]["path"]] = self.last_reason

    def explain(self, summary: ImportSummary) -> None:
        """Add the service's reason to each failed file's message."""
        summary.failed = [(path, f"{why}: {self.reasons[path]}" if path in self.reasons else why)
                          for path, why in summary.failed]


async def _run(options: ImportOptions, watch: Watch, console: Console, show_progress: bool) -> ImportSummary:
    async with httpx.AsyncClient(base_url=options.url, timeout=options.timeout_s,
                                 event_hooks={"request": [watch.on_request], "response": [watch.on_response]}
                                 ) as http:
        return await run_import(options, http=http, console=console, show_progress=show_progress)


def cmd_import(settings: Settings, args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    access = service_access(settings, args)
    if access is None:
        return 2
    url, key = access
    root = Path(args.path)
    if not root.is_dir():
        print(f"error: {root} is not a directory", file=sys.stderr)
        return 2
    options = ImportOptions(root=root, url=url, key=key, collection=args.collection, agent_id=args.agent_id,
                            batch_files=args.batch_files, batch_bytes=args.batch_bytes,
                            max_file_bytes=settings.documents.max_file_bytes, delete=not args.no_delete,
                            include_vcs=args.include_vcs)
    watch = Watch()
    try:
        summary = asyncio.run(_run(options, watch, console, not args.quiet))
    except ImportFailed as exc:
        why = watch.last_reason
        print(f"error: {exc}{f': {why}' if why and why not in str(exc) else ''}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"import interrupted: {watch.files:,} files sent ({watch.chunks:,} chunks written) so far; run it "
              "again to resume (files already sent are unchanged and not sent again)", file=sys.stderr)
        return INTERRUPTED
    watch.explain(summary)
    print_summary(summary, Console())
    return 0 if summary.ok else 1
