/**
 * Vercel AI SDK tools (`ai` 5 or later): an agent's pgcontext memory as tools a model can call, the
 * same tools and wording as the pgcontext MCP server's.
 *
 * Which agent the memories belong to is configuration (`agentId`), never a tool input: the model using
 * the tools reads and writes its own memory only. Each call to the service carries the SDK's abort
 * signal (`generateText({ abortSignal })`), so aborting the generation cancels it.
 */

import { tool } from "ai";
import { z } from "zod";

import type { Client } from "./client.js";
import { PgcontextError } from "./errors.js";
import type { MemoryIn } from "./types.js";

export interface PgcontextToolsOptions {
  /** The client the tools call (its URL and API key decide the service and the org). */
  client: Client;
  /** Whose memories, directive and context the tools work on. */
  agentId: string;
  /** Model whose tokenizer counts `assembleContext`'s budget (any name the service accepts). Default `gpt-4o`. */
  model?: string;
  /** `assembleContext`'s default budget; unset: selective mode (the service sizes it from the query). */
  maxContextTokens?: number;
}

export const REMEMBER = `Store new long-term memories for this agent, so later conversations can recall them.

Use it when you learn something worth keeping beyond this conversation: a user's preference or fact
about them, a decision, a commitment, an event with its date, a correction of something remembered.
Write each memory as one self-contained statement ("The user is allergic to peanuts."), not a
transcript. Give \`text\` for one memory, or \`memories\` for several at once (up to 256). Returns the
new memory ids (keep them if you may later rate these memories).`;

export const RECALL = `Search this agent's long-term memories by meaning and keywords (hybrid search).

Use it to look something up explicitly: "what do I know about the user's diet?", or to find a
memory's id. Results are best first, each with its id, text, kind and when it happened. For
everything relevant to answering a message within a token budget, prefer \`assembleContext\`.`;

export const ASSEMBLE = `Build the best context for answering a query: the agent's directive, its most useful
memories and the recent conversation, ranked and packed into a token budget.

Call it before answering a user message that may depend on what you remember. Memories in the
returned \`context\` are numbered lines ("1 The user ..."); \`refs\` maps each number to the memory id,
which is what \`giveFeedback\` takes. \`max_context_tokens\` caps the size (default: configured, or
sized automatically from the query).`;

export const FEEDBACK = `Tell the memory service which memories helped and which did not.

Call it after answering with context from \`assembleContext\` or \`recall\`: list the ids of memories
that were useful in \`helpful_ids\`, and those that were irrelevant or wrong in \`unhelpful_ids\`. It
changes how those memories rank in future context.`;

const newMemory = z.object({
  text: z.string().describe("The fact, preference, event or instruction, self-contained and specific."),
  kind: z.string().optional().describe("A lowercase label such as fact, preference, event, task (default fact)."),
  importance: z.number().min(0).max(1).optional().describe("0-1; higher is kept in view more (default 0.5)."),
  pinned: z.boolean().optional().describe("Always offer this memory in assembled context."),
  occurred_at: z.string().optional().describe("When it happened or was said (ISO 8601 with timezone); default now."),
  metadata: z.record(z.string(), z.unknown()).optional().describe("Optional JSON object for filtering later."),
  search_context: z.string().optional().describe(
    "Words this memory should be found by but that are not part of it, e.g. the question a reply answers; "
    + "searched, never shown."),
});

const chatMessage = z.object({
  role: z.string().describe("user, assistant, system or tool"),
  content: z.string(),
});

/** The service's errors worded for the model (the request id lets an operator find the log line). */
async function answered<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (error instanceof PgcontextError) {
      throw new Error(`pgcontext answered ${error.status} ${error.code}: ${error.message} `
        + `(request id ${error.requestId ?? "none"})`, { cause: error });
    }
    throw error;
  }
}

/** The request options of a tool call: the SDK's abort signal (a caller of `execute` may give no options). */
function signal(call: { abortSignal?: AbortSignal } | undefined): { signal?: AbortSignal } {
  return call?.abortSignal ? { signal: call.abortSignal } : {};
}

/** Drop the keys whose value is undefined (the service applies its own defaults to absent fields). */
function defined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

/** `remember`, `recall`, `assembleContext` and `giveFeedback`, bound to one agent's memory. */
export function pgcontextTools(options: PgcontextToolsOptions) {
  const { client, agentId } = options;
  const model = options.model ?? "gpt-4o";

  const remember = tool({
    description: REMEMBER,
    inputSchema: z.object({
      text: z.string().optional().describe("One memory to store."),
      memories: z.array(newMemory).max(256).optional().describe("Several memories to store at once."),
      kind: z.string().optional().describe("Kind of `text` (e.g. preference, event)."),
      importance: z.number().min(0).max(1).optional().describe("Importance of `text`, 0-1."),
    }),
    execute: async ({ text, memories, kind, importance }, call) => {
      const batch: MemoryIn[] = (memories ?? []).map((m) => defined({ ...m, agent_id: agentId }));
      if (text !== undefined) batch.unshift(defined({ text, agent_id: agentId, kind, importance }));
      if (batch.length === 0) throw new Error("give `text` (one memory) or `memories` (several)");
      const created = await answered(() => client.createMemories(batch, signal(call)));
      return { stored: created.ids.length, ids: created.ids };
    },
  });

  const recall = tool({
    description: RECALL,
    inputSchema: z.object({
      query: z.string().describe("What to look for, in natural language or keywords."),
      limit: z.number().int().min(1).max(50).default(5).describe("How many memories at most."),
      kinds: z.array(z.string()).optional().describe("Only these kinds (e.g. [\"preference\"])."),
    }),
    execute: async ({ query, limit, kinds }, call) => {
      const found = await answered(() => client.search(query, { limit, filters: defined({ agent_id: agentId, kinds }) },
        signal(call)));
      return {
        memories: found.results.map((r) => ({
          id: r.id, text: r.text, kind: r.kind, score: r.score,
          occurred_at: r.occurred_at ?? null,
        })),
      };
    },
  });

  const assembleContext = tool({
    description: ASSEMBLE,
    inputSchema: z.object({
      query: z.string().describe("The message or question to answer."),
      recent_messages: z.array(chatMessage).optional().describe(
        "The latest conversation turns, oldest first (kept as far as the budget allows)."),
      max_context_tokens: z.number().int().min(1).optional().describe("Token budget for the whole block."),
    }),
    execute: async ({ query, recent_messages, max_context_tokens }, call) => {
      const budget = max_context_tokens ?? options.maxContextTokens;
      // No budget anywhere: the service sizes it from the query.
      const sizing = budget === undefined ? { selective: true } : { max_context_tokens: budget };
      const ctx = await answered(() => client.assemble(agentId, query, {
        model, recent_messages: recent_messages ?? [], ...sizing,
      }, signal(call)));
      return {
        context: ctx.context, refs: ctx.refs, context_tokens: ctx.budget.context_tokens,
        degradation_level: ctx.degradation_level, degradation_reasons: ctx.degradation_reasons,
      };
    },
  });

  const giveFeedback = tool({
    description: FEEDBACK,
    inputSchema: z.object({
      helpful_ids: z.array(z.string()).optional().describe("Ids of memories that helped."),
      unhelpful_ids: z.array(z.string()).optional().describe("Ids of memories that did not."),
    }),
    execute: async ({ helpful_ids, unhelpful_ids }, call) => {
      const verdicts: Record<string, boolean> = {};
      for (const id of unhelpful_ids ?? []) verdicts[id] = false;
      for (const id of helpful_ids ?? []) verdicts[id] = true;
      if (Object.keys(verdicts).length === 0) throw new Error("give `helpful_ids`, `unhelpful_ids` or both");
      const result = await answered(() => client.feedback(verdicts, signal(call)));
      return { updated: result.updated.length, not_found: result.not_found };
    },
  });

  return { remember, recall, assembleContext, giveFeedback };
}
