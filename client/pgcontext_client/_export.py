"""Reading the NDJSON export stream (``Client.export``, ``AsyncClient.export``): a line at a time, and
never taking a stream that stopped early for the whole export.

Lines end at ``\\n`` only: a JSON string may hold U+2028, U+2029 or U+0085 unescaped, which a reader
splitting as ``str.splitlines`` does (httpx's ``iter_lines``) would take for line ends. The service ends
a complete export with an ``end`` line; when reading fails after the answer started, its last line is
``{"type": "error", ...}`` instead. Either that line, a stream ending with neither, or a last line cut in
the middle raises ``IncompleteExport``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from pgcontext_client.errors import IncompleteExport


class ExportReader:
    """Decodes one export's bytes into its lines, in order, and checks that it ends as a complete export
    does: ``feed`` each chunk as it comes, then ``finish``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.lines = 0
        self.ended = False
        self._rest = b""

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        """The lines ``chunk`` completes (a line cut by the chunk's end waits for the next one)."""
        *complete, self._rest = (self._rest + chunk).split(b"\n")
        return [line for raw in complete if (line := self._line(raw)) is not None]

    def finish(self) -> list[dict[str, Any]]:
        """The stream ended: its last line if it had no ``\\n``; raises unless the last line was ``end``."""
        rest, self._rest = self._rest, b""
        last = self._line(rest)
        if not self.ended:
            raise self._incomplete(f"the stream ended after {self.lines} lines without its end line",
                                   "export_incomplete")
        return [] if last is None else [last]

    def _line(self, raw: bytes) -> dict[str, Any] | None:
        if not raw.strip():
            return None
        if self.ended:
            raise self._incomplete(f"a line after the end line (line {self.lines + 1})", "export_incomplete")
        try:
            item = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            raise self._incomplete(f"line {self.lines + 1} is not JSON (cut short?)", "export_incomplete") from None
        if not isinstance(item, dict):
            raise self._incomplete(f"line {self.lines + 1} is not a JSON object", "export_incomplete")
        self.lines += 1
        if item.get("type") == "error":
            code = item.get("code")
            raise self._incomplete(f"the service stopped the export part-way: {item.get('message', '')}",
                                   code if isinstance(code, str) else "export_failed")
        self.ended = item.get("type") == "end"
        return item

    def _incomplete(self, what: str, code: str) -> IncompleteExport:
        return IncompleteExport(f"incomplete export from {self.url}: {what}; run the export again", code=code,
                                url=self.url)
