/**
 * Reading the NDJSON export stream (`Client.export`): a line at a time, never taking a stream that
 * stopped early for the whole export.
 *
 * The service ends a complete export with an `end` line; when reading fails after the answer started,
 * its last line is `{ type: "error", ... }` instead. Either that line, a stream ending with neither, a
 * line after `end` or a line cut in the middle throws `IncompleteExport`.
 */

import { IncompleteExport } from "./errors.js";
import type { ExportLine } from "./types.js";

export class ExportReader {
  private lines = 0;
  private ended = false;

  constructor(private readonly requestId: string | null) {}

  /** The line as an object (null: a blank line, skipped). */
  line(text: string): ExportLine | null {
    if (!text.trim()) return null;
    if (this.ended) throw this.incomplete(`a line after the end line (line ${this.lines + 1})`, "export_incomplete");
    let item: unknown;
    try {
      item = JSON.parse(text);
    } catch (error) {
      throw this.incomplete(`line ${this.lines + 1} is not JSON (cut short?)`, "export_incomplete", error);
    }
    if (typeof item !== "object" || item === null || Array.isArray(item)) {
      throw this.incomplete(`line ${this.lines + 1} is not a JSON object`, "export_incomplete");
    }
    this.lines += 1;
    const { type, code, message } = item as Record<string, unknown>;
    if (type === "error") {
      throw this.incomplete(`the service stopped the export part-way: ${typeof message === "string" ? message : ""}`,
        typeof code === "string" ? code : "export_failed");
    }
    this.ended = type === "end";
    return item as ExportLine;
  }

  /** The stream ended: throw unless its last line was the `end` line. */
  finish(): void {
    if (!this.ended) {
      throw this.incomplete(`the stream ended after ${this.lines} lines without its end line`, "export_incomplete");
    }
  }

  private incomplete(what: string, code: string, cause?: unknown): IncompleteExport {
    return new IncompleteExport(`GET /v1/export: incomplete export: ${what}; run the export again`,
      { code, requestId: this.requestId, cause });
  }
}
