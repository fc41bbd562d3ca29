import { fileURLToPath } from "node:url";

import { defineConfig } from "vitest/config";

// Tests (and the README's examples they run) import the package by its name, resolved to the sources.
const src = (file: string): string => fileURLToPath(new URL(`./src/${file}`, import.meta.url));

export default defineConfig({
  resolve: {
    alias: [
      { find: /^pgcontext\/ai$/, replacement: src("ai.ts") },
      { find: /^pgcontext$/, replacement: src("index.ts") },
    ],
  },
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // One live service under the suite: files run one after another, as a single client would.
    fileParallelism: false,
  },
});
