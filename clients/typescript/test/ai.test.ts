/** The AI SDK tools against a live service: executed directly, then driven by `generateText` with a model. */

import { randomUUID } from "node:crypto";
import { generateText, type InferToolInput, type InferToolOutput, stepCountIs } from "ai";
import { describe, expect, test } from "vitest";

import { Client } from "pgcontext";
import { pgcontextTools } from "pgcontext/ai";

import { agent, client, Recorder, url } from "./live.js";
import { scriptedModel } from "./model.js";

const call: { toolCallId: string; messages: never[]; abortSignal?: AbortSignal } = { toolCallId: "direct", messages: [] };

type Tools = ReturnType<typeof pgcontextTools>;
/** A tool's `execute` as the SDK calls it (the SDK types it as optional and as possibly streaming). */
function run<K extends keyof Tools>(tools: Tools, name: K) {
  return async (input: InferToolInput<Tools[K]>, options: typeof call): Promise<InferToolOutput<Tools[K]>> => {
    const execute = tools[name].execute as
      | ((input: InferToolInput<Tools[K]>, options: typeof call) => Promise<InferToolOutput<Tools[K]>>)
      | undefined;
    if (execute === undefined) throw new Error(`${name} has no execute`);
    return execute(input, options);
  };
}

describe("pgcontextTools executed directly", () => {
  test("remember, recall, assembleContext and giveFeedback work on the configured agent only", async () => {
    const pg = client();
    const who = agent("tools");
    const tools = pgcontextTools({ client: pg, agentId: who, maxContextTokens: 1500 });
    expect(Object.keys(tools).sort()).toEqual(["assembleContext", "giveFeedback", "recall", "remember"]);

    const stored = await run(tools, "remember")({ text: "The user is allergic to peanuts.", kind: "preference",
      memories: [{ text: "The user's birthday is on 4 March.", kind: "event", importance: 0.8 }] }, call);
    expect(stored.stored).toBe(2);
    const [peanuts, birthday] = stored.ids as [string, string];
    expect((await pg.getMemory(peanuts)).agent_id).toBe(who);
    expect(await pg.getMemory(birthday)).toMatchObject({ agent_id: who, kind: "event" });

    const found = await run(tools, "recall")({ query: "peanut allergy", limit: 5 }, call);
    expect(found.memories[0]).toMatchObject({ id: peanuts, text: "The user is allergic to peanuts.", kind: "preference" });
    expect(found.memories[0]?.score).toBeGreaterThan(0);
    const onlyEvents = await run(tools, "recall")({ query: "peanut allergy birthday", limit: 5, kinds: ["event"] }, call);
    expect(onlyEvents.memories.map((m) => m.id)).toEqual([birthday]);
    // Another agent's memories are out of reach.
    const stranger = pgcontextTools({ client: pg, agentId: agent("stranger") });
    expect((await run(stranger, "recall")({ query: "peanut allergy", limit: 5 }, call)).memories).toEqual([]);

    const ctx = await run(tools, "assembleContext")({ query: "what can the user not eat?",
      recent_messages: [{ role: "user", content: "Plan a snack for me." }] }, call);
    expect(ctx.context).toContain("allergic to peanuts");
    expect(ctx.context).toContain("Plan a snack for me.");
    expect(Object.values(ctx.refs)).toContain(peanuts);
    expect(ctx.context_tokens).toBeGreaterThan(0);
    expect(ctx.context_tokens).toBeLessThanOrEqual(1500);
    expect(["L0", "L1"]).toContain(ctx.degradation_level);

    const rated = await run(tools, "giveFeedback")({ helpful_ids: [peanuts], unhelpful_ids: [randomUUID()] }, call);
    expect(rated.updated).toBe(1);
    expect(rated.not_found).toHaveLength(1);
    expect((await pg.getMemory(peanuts)).usefulness).toBeGreaterThan(0);
    await pg.eraseAgent(who);
  });

  test("selective sizing without a budget; errors are worded for the model", async () => {
    const recorder = new Recorder();
    const pg = client({ fetch: recorder.fetch });
    const who = agent("tools");
    const tools = pgcontextTools({ client: pg, agentId: who, model: "gpt-4o-mini" });
    await run(tools, "remember")({ text: "The user lives in Lisbon." }, call);
    const ctx = await run(tools, "assembleContext")({ query: "where does the user live?" }, call);
    expect(ctx.context).toContain("Lisbon");
    expect(ctx.context_tokens).toBeGreaterThan(0);
    const sent = JSON.parse(recorder.sent.at(-1)?.body ?? "{}") as Record<string, unknown>;
    expect(sent).toMatchObject({ agent_id: who, model: "gpt-4o-mini", selective: true });
    expect(sent).not.toHaveProperty("max_context_tokens");
    await pg.eraseAgent(who);

    await expect(run(tools, "remember")({}, call)).rejects.toThrow("give `text` (one memory) or `memories` (several)");
    await expect(run(tools, "giveFeedback")({}, call)).rejects.toThrow("give `helpful_ids`, `unhelpful_ids` or both");
    const locked = pgcontextTools({ client: new Client({ url: url(), apiKey: "pgc_not_a_key" }), agentId: "x" });
    await expect(run(locked, "recall")({ query: "q", limit: 5 }, call))
      .rejects.toThrow(/^pgcontext answered 401 unauthorized: .+ \(request id [0-9a-f]+\)$/);
  });
});

describe("pgcontextTools cancelled", () => {
  test("each tool's call to the service carries the SDK's abort signal", async () => {
    const recorder = new Recorder();
    const tools = pgcontextTools({ client: client({ fetch: recorder.fetch }), agentId: agent("abort") });
    const controller = new AbortController();
    controller.abort(new Error("the generation was aborted"));
    const aborted = { ...call, abortSignal: controller.signal };
    await expect(run(tools, "remember")({ text: "Never stored." }, aborted)).rejects.toThrow("the generation was aborted");
    await expect(run(tools, "recall")({ query: "q", limit: 5 }, aborted)).rejects.toThrow("the generation was aborted");
    await expect(run(tools, "assembleContext")({ query: "q" }, aborted)).rejects.toThrow("the generation was aborted");
    await expect(run(tools, "giveFeedback")({ helpful_ids: [randomUUID()] }, aborted))
      .rejects.toThrow("the generation was aborted");
    expect(recorder.sent).toEqual([]);
  });
});

describe("pgcontextTools in a generateText loop", () => {
  test("the model remembers, assembles context, and answers from it", async () => {
    const pg = client();
    const who = agent("loop");
    const model = scriptedModel([
      { tool: "remember", input: { text: "The user takes their coffee black, no sugar.", kind: "preference" } },
      { tool: "assembleContext", input: { query: "How does the user take their coffee?", max_context_tokens: 1000 } },
      { tool: "giveFeedback", input: (results) => ({ helpful_ids: (results[0] as { ids: string[] }).ids }) },
    ], (results) => {
      const { context } = results[1] as { context: string };
      return context.includes("coffee black") ? "You take it black, no sugar." : "I don't know.";
    });

    const result = await generateText({
      model, tools: pgcontextTools({ client: pg, agentId: who }), stopWhen: stepCountIs(5),
      prompt: "I take my coffee black, no sugar. How do I take my coffee?",
    });

    expect(result.text).toBe("You take it black, no sugar.");
    expect(result.steps.map((s) => s.toolCalls.map((c) => c.toolName))).toEqual([
      ["remember"], ["assembleContext"], ["giveFeedback"], []]);
    expect(result.steps.flatMap((s) => s.content).filter((p) => p.type === "tool-error")).toEqual([]);
    const offered = model.doGenerateCalls[0]?.tools ?? [];
    expect(offered.map((t) => t.name).sort()).toEqual(["assembleContext", "giveFeedback", "recall", "remember"]);
    for (const tool of offered) {
      expect(tool.type).toBe("function");
      if (tool.type === "function") {
        expect(tool.description).toBeTruthy();
        expect(tool.inputSchema).toMatchObject({ type: "object" });
      }
    }

    const [memory] = (await pg.listMemories({ agent_id: who })).items;
    expect(memory).toMatchObject({ text: "The user takes their coffee black, no sugar.", kind: "preference" });
    expect(memory?.usefulness).toBeGreaterThan(0); // the model's feedback reached the service
    await pg.eraseAgent(who);
  });
});
