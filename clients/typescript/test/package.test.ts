/**
 * The package as it ships: `npm pack` builds dist/, the tarball holds the compiled modules and their
 * types, `pgcontext` and `pgcontext/ai` import by name in plain Node, and the core loads neither `ai` nor `zod`.
 */

import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

import { beforeAll, describe, expect, test } from "vitest";

import { VERSION } from "pgcontext";

const PACKAGE = fileURLToPath(new URL("..", import.meta.url));

function node(code: string): string {
  return execFileSync(process.execPath, ["--input-type=module", "-e", code], { cwd: PACKAGE, encoding: "utf8",
    env: { ...process.env, NODE_OPTIONS: "" } });
}

describe("the built package", () => {
  let files = new Set<string>();

  beforeAll(() => {
    // `prepack` builds dist/ first, as it does for a real `npm pack` or publish.
    const [packed] = JSON.parse(execFileSync("npm", ["pack", "--dry-run", "--json"], {
      cwd: PACKAGE, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] })) as Array<{ files: Array<{ path: string }> }>;
    files = new Set(packed?.files.map((f) => f.path));
  }, 120_000);

  test("npm pack ships the compiled modules, their types and the README", () => {
    for (const path of ["dist/index.js", "dist/index.d.ts", "dist/ai.js", "dist/ai.d.ts", "dist/schema.d.ts",
      "package.json", "README.md"]) {
      expect(files, path).toContain(path);
    }
    expect([...files].filter((f) => f.startsWith("test/") || f.startsWith("node_modules/"))).toEqual([]);
  });

  test("imports by name in plain Node; the core loads neither ai nor zod", () => {
    const out = node(`
      import { Client, NotFound, PgcontextError, RetryPolicy } from "pgcontext";
      import { pgcontextTools } from "pgcontext/ai";
      const tools = pgcontextTools({ client: new Client({ url: "http://127.0.0.1:9" }), agentId: "a" });
      console.log(JSON.stringify({ notFound: new NotFound("x") instanceof PgcontextError,
        attempts: new RetryPolicy().attempts, tools: Object.keys(tools) }));`);
    expect(JSON.parse(out)).toEqual({ notFound: true, attempts: 4,
      tools: ["remember", "recall", "assembleContext", "giveFeedback"] });
    const core = ["index", "client", "errors", "export", "http", "retry", "types", "schema"]
      .map((name) => readFileSync(`${PACKAGE}dist/${name}.js`, "utf8")).join("\n");
    expect(core).toMatch(/from "\.\/client\.js"/);
    expect(core).not.toMatch(/from "(ai|zod)"/);
    const manifest = JSON.parse(readFileSync(`${PACKAGE}package.json`, "utf8")) as Record<string, unknown>;
    expect(manifest.dependencies).toBeUndefined();
    expect(VERSION).toBe(manifest.version); // the User-Agent names the version published
  });

  test("CommonJS code requires it by name where Node requires ES modules (20.19+, 22.12+)", () => {
    const code = `
      const { Client, NotFound, PgcontextError } = require("pgcontext");
      const { pgcontextTools } = require("pgcontext/ai");
      const tools = pgcontextTools({ client: new Client({ url: "http://127.0.0.1:9" }), agentId: "a" });
      console.log(JSON.stringify({ notFound: new NotFound("x") instanceof PgcontextError, tools: Object.keys(tools),
        version: require("pgcontext/package.json").version }));`;
    const run = (): string => execFileSync(process.execPath, ["-e", code], { cwd: PACKAGE, encoding: "utf8",
      env: { ...process.env, NODE_OPTIONS: "" }, stdio: ["ignore", "pipe", "pipe"] });
    if ((process.features as { require_module?: boolean }).require_module) {
      expect(JSON.parse(run())).toEqual({ notFound: true, tools: ["remember", "recall", "assembleContext", "giveFeedback"],
        version: VERSION });
    } else {
      expect(run).toThrow(/ERR_REQUIRE_ESM/); // an older Node says why: use import() there
    }
  });
});
