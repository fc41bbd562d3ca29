/**
 * The README's examples, extracted from the Markdown and run as written against the live service: the
 * client example as is, the AI SDK example with `model` bound to a scripted model that calls the tools.
 */

import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

import { afterEach, describe, expect, test, vi } from "vitest";

import { client } from "./live.js";

const README = fileURLToPath(new URL("../README.md", import.meta.url));
const SCRATCH = fileURLToPath(new URL("../.readme/", import.meta.url));

/** The `language` code blocks of the README's `## section` (up to the next `## `). */
export function fenced(section: string, language: string): string[] {
  const text = readFileSync(README, "utf8");
  const start = text.indexOf(`\n## ${section}\n`);
  expect(start, `README section ${section}`).toBeGreaterThan(-1);
  const end = text.indexOf("\n## ", start + 1);
  const body = text.slice(start, end === -1 ? undefined : end);
  return [...body.matchAll(new RegExp(`^\`\`\`${language}\\n(.*?)^\`\`\`$`, "gms"))].map((m) => m[1] ?? "");
}

/** What binds the AI SDK example's `model`: the scripted model of `readme-model.ts`. */
const MODEL_IMPORT = `import { model } from ${JSON.stringify(fileURLToPath(new URL("./readme-model.js", import.meta.url)))};\n`;

/** Run `code` as a module (imports resolve as in the tests: `pgcontext` is this package); returns what it logged. */
async function runModule(name: string, code: string): Promise<string[]> {
  mkdirSync(SCRATCH, { recursive: true });
  const file = `${SCRATCH}${name}-${Date.now()}.ts`;
  writeFileSync(file, code);
  const log = vi.spyOn(console, "log").mockImplementation(() => undefined);
  try {
    await import(/* @vite-ignore */ file);
    return log.mock.calls.map((args) => args.map(String).join(" "));
  } finally {
    log.mockRestore();
  }
}

afterEach(async () => {
  await client().eraseAgent("barista");
});

describe("README", () => {
  test("the examples type-check under the package's strict settings", () => {
    rmSync(SCRATCH, { recursive: true, force: true });
    mkdirSync(SCRATCH, { recursive: true });
    writeFileSync(`${SCRATCH}usage.ts`, fenced("Usage", "ts")[0] ?? "");
    writeFileSync(`${SCRATCH}ai.ts`, `${MODEL_IMPORT}${fenced("Vercel AI SDK", "ts")[0] ?? ""}`);
    writeFileSync(`${SCRATCH}tsconfig.json`, JSON.stringify({
      extends: "../tsconfig.json", compilerOptions: { rootDir: ".." }, include: ["*.ts"] }));
    const tsc = fileURLToPath(new URL("../node_modules/typescript/bin/tsc", import.meta.url));
    execFileSync(process.execPath, [tsc, "--noEmit", "-p", `${SCRATCH}tsconfig.json`], { encoding: "utf8" });
  }, 120_000);

  test("the usage example runs: memory, directive, assembled context, feedback", async () => {
    const [example] = fenced("Usage", "ts");
    expect(example).toBeDefined();
    const printed = await runModule("usage", example as string);
    expect(printed.join("\n")).toContain("The user prefers dark roast coffee.");
    expect(printed.join("\n")).toContain("<directive>");
    const pg = client();
    const [memory] = (await pg.listMemories({ agent_id: "barista" })).items;
    expect(memory?.text).toBe("The user prefers dark roast coffee.");
    expect(memory?.usefulness).toBeGreaterThan(0); // the feedback
    expect((await pg.getDirective("barista")).content).toBe("Recommend one drink, briefly.");
    await pg.deleteDirective("barista");
  });

  test("the AI SDK example runs with a model that calls the tools", async () => {
    const [example] = fenced("Vercel AI SDK", "ts");
    expect(example).toBeDefined();
    const printed = await runModule("ai", `${MODEL_IMPORT}${example as string}`);
    expect(printed).toEqual(["You take it black, no sugar."]);
    const [memory] = (await client().listMemories({ agent_id: "barista" })).items;
    expect(memory?.text).toBe("The user takes their coffee black, no sugar.");
  });
});
