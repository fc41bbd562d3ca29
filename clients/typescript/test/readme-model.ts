/** The model the README's AI SDK example runs with: it remembers the preference, assembles, then answers. */

import { scriptedModel } from "./model.js";

export const model = scriptedModel([
  { tool: "remember", input: { text: "The user takes their coffee black, no sugar.", kind: "preference" } },
  { tool: "assembleContext", input: { query: "How does the user take their coffee?", max_context_tokens: 1000 } },
], (results) => {
  const { context } = results[1] as { context: string };
  return context.includes("coffee black, no sugar") ? "You take it black, no sugar." : "I don't know.";
});
