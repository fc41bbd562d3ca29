/**
 * A scripted language model for AI SDK loops (the SDK's own `MockLanguageModelV3`): it calls the given
 * tools one step after another, then answers with what `answer` makes of the tools' results. It reads
 * the results from the prompt the SDK sends back, so the tools really ran between the steps.
 */

import { MockLanguageModelV3 } from "ai/test";

type CallOptions = Parameters<MockLanguageModelV3["doGenerate"]>[0];
type GenerateResult = Awaited<ReturnType<MockLanguageModelV3["doGenerate"]>>;

export interface ToolStep {
  tool: string;
  input: Record<string, unknown> | ((results: unknown[]) => Record<string, unknown>);
}

const usage: GenerateResult["usage"] = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
};

/** The outputs of the tool calls so far, in order (a tool that threw gives `{ error: text }`). */
export function toolResults(options: CallOptions): unknown[] {
  const results: unknown[] = [];
  for (const message of options.prompt) {
    if (message.role !== "tool") continue;
    for (const part of message.content) {
      if (part.type !== "tool-result") continue;
      const output = part.output;
      if (output.type === "json" || output.type === "text") results.push(output.value);
      else if (output.type === "error-text" || output.type === "error-json") results.push({ error: output.value });
      else results.push({ error: output.type });
    }
  }
  return results;
}

export function scriptedModel(steps: ToolStep[], answer: (results: unknown[]) => string): MockLanguageModelV3 {
  return new MockLanguageModelV3({
    doGenerate: async (options) => {
      const results = toolResults(options);
      const step = steps[results.length];
      if (step === undefined) {
        return { content: [{ type: "text", text: answer(results) }], finishReason: { unified: "stop", raw: "stop" },
          usage, warnings: [] };
      }
      const input = typeof step.input === "function" ? step.input(results) : step.input;
      return {
        content: [{ type: "tool-call", toolCallId: `call-${results.length}`, toolName: step.tool,
          input: JSON.stringify(input) }],
        finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [],
      };
    },
  });
}
