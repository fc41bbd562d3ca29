/**
 * Every operation of the OpenAPI schema has a client method that sends it. The table is typed by the
 * generated schema: an operation added to a regenerated `src/schema.ts` fails the type check (`make lint`)
 * until it has its entry here, and this test then checks the entry against the live service's schema.
 */

import { randomUUID } from "node:crypto";

import { describe, expect, test } from "vitest";

import { Client, type ExportLine } from "pgcontext";

import type { operations } from "../src/schema.js";
import { agent, apiKey, Recorder, url } from "./live.js";

type Method = { [K in keyof Client]: Client[K] extends (...args: never[]) => unknown ? K : never }[keyof Client];

const OPERATIONS: Record<keyof operations, { verb: string; path: string; method: Method | null }> = {
  HealthzHealthz: { verb: "GET", path: "/healthz", method: "health" },
  ReadyzReadyz: { verb: "GET", path: "/readyz", method: "ready" },
  V1MemoriesListMemories: { verb: "GET", path: "/v1/memories", method: "listMemories" },
  V1MemoriesCreate: { verb: "POST", path: "/v1/memories", method: "createMemory" },
  V1MemoriesRemoveAgent: { verb: "DELETE", path: "/v1/memories", method: "eraseAgent" },
  V1MemoriesMemoryIdGetOne: { verb: "GET", path: "/v1/memories/{memory_id}", method: "getMemory" },
  V1MemoriesMemoryIdRemove: { verb: "DELETE", path: "/v1/memories/{memory_id}", method: "deleteMemory" },
  V1MemoriesMemoryIdUpdate: { verb: "PATCH", path: "/v1/memories/{memory_id}", method: "updateMemory" },
  V1MemoriesMemoryIdHistoryHistory: {
    verb: "GET", path: "/v1/memories/{memory_id}/history", method: "memoryHistory" },
  V1MemoriesMemoryIdHistoryEventIdUndoUndo: {
    verb: "POST", path: "/v1/memories/{memory_id}/history/{event_id}/undo", method: "undoEvent" },
  V1OrgSettingsGetSettings: { verb: "GET", path: "/v1/org/settings", method: "orgSettings" },
  V1OrgSettingsSetSettings: { verb: "PATCH", path: "/v1/org/settings", method: "setOrgSettings" },
  V1MemoriesSearchSearch: { verb: "POST", path: "/v1/memories/search", method: "search" },
  V1AgentsAgentIdDirectiveGetDirective: { verb: "GET", path: "/v1/agents/{agent_id}/directive", method: "getDirective" },
  V1AgentsAgentIdDirectivePutDirective: { verb: "PUT", path: "/v1/agents/{agent_id}/directive", method: "putDirective" },
  V1AgentsAgentIdDirectiveDeleteDirective: {
    verb: "DELETE", path: "/v1/agents/{agent_id}/directive", method: "deleteDirective" },
  V1DocumentsListDocuments: { verb: "GET", path: "/v1/documents", method: "listDocuments" },
  V1DocumentsIngestFiles: { verb: "POST", path: "/v1/documents", method: "ingestDocuments" },
  V1DocumentsDeleteDocuments: { verb: "DELETE", path: "/v1/documents", method: "deleteDocuments" },
  V1DocumentsIndexIndexSummary: { verb: "GET", path: "/v1/documents/index", method: "documentsIndex" },
  V1ContextAssembleAssemble: { verb: "POST", path: "/v1/context/assemble", method: "assemble" },
  V1MemoriesHotHotSet: { verb: "GET", path: "/v1/memories/hot", method: "hotSet" },
  V1MemoriesFeedbackFeedback: { verb: "POST", path: "/v1/memories/feedback", method: "feedback" },
  V1ExportExport: { verb: "GET", path: "/v1/export", method: "export" },
  V1ImportImportLines: { verb: "POST", path: "/v1/import", method: "importLines" },
  V1ConversationsConversationIdMessagesAppendMessages: {
    verb: "POST", path: "/v1/conversations/{conversation_id}/messages", method: "appendMessages" },
  V1ConversationsConversationIdMessagesListMessages: {
    verb: "GET", path: "/v1/conversations/{conversation_id}/messages", method: "listMessages" },
  V1ConversationsConversationIdMessagesTruncate: {
    verb: "DELETE", path: "/v1/conversations/{conversation_id}/messages", method: "truncateConversation" },
  V1ConversationsConversationIdGetOne: { verb: "GET", path: "/v1/conversations/{conversation_id}", method: "getConversation" },
  V1ConversationsConversationIdRemove: {
    verb: "DELETE", path: "/v1/conversations/{conversation_id}", method: "deleteConversation" },
  V1ConversationsListConversations: { verb: "GET", path: "/v1/conversations", method: "listConversations" },
  MetricsGet: { verb: "GET", path: "/metrics", method: null }, // Prometheus text for scrapers, not an API call
};

function template(path: string): RegExp {
  return new RegExp(`^${path.replace(/\{[^}]+\}/g, "[^/]+")}$`);
}

describe("coverage of the OpenAPI schema", () => {
  test("the table lists exactly the live service's operations, at their paths", async () => {
    const schema = await (await fetch(`${url()}/schema/openapi.json`)).json() as {
      paths: Record<string, Record<string, { operationId?: string }>> };
    const live = new Map<string, { verb: string; path: string }>();
    for (const [path, item] of Object.entries(schema.paths)) {
      for (const [verb, operation] of Object.entries(item)) {
        if (operation.operationId) live.set(operation.operationId, { verb: verb.toUpperCase(), path });
      }
    }
    expect(new Set(live.keys())).toEqual(new Set(Object.keys(OPERATIONS)));
    for (const [id, { verb, path, method }] of Object.entries(OPERATIONS)) {
      expect(live.get(id), id).toEqual({ verb, path });
      if (method !== null) expect(typeof Client.prototype[method], method).toBe("function");
    }
  });

  test("each method sends its operation", async () => {
    const recorder = new Recorder();
    const pg = new Client({ url: url(), apiKey: apiKey(), fetch: recorder.fetch });
    const who = agent("cov");
    const collection = agent("cov");
    const sent = new Map<Method, { verb: string; path: string }>();
    const record = async (method: Method, work: () => Promise<unknown>): Promise<void> => {
      const before = recorder.sent.length;
      await work();
      const request = recorder.sent[before];
      expect(request, method).toBeDefined();
      sent.set(method, { verb: request?.method ?? "", path: request?.path ?? "" });
    };
    let id = "";
    await record("health", () => pg.health());
    await record("ready", () => pg.ready());
    await record("createMemory", async () => { id = (await pg.createMemory("x", { agent_id: who })).ids[0] ?? ""; });
    await record("listMemories", () => pg.listMemories({ agent_id: who }));
    await record("getMemory", () => pg.getMemory(id));
    await record("updateMemory", () => pg.updateMemory(id, { text: "y" }));
    await record("memoryHistory", () => pg.memoryHistory(id));
    // (record() keeps the first request its callback sends: the merge to undo is made before.)
    const twin = await pg.createMemory("y", { agent_id: who });
    expect((twin.items ?? []).find((item) => item.status === "merged")?.id).toBe(id);
    const history = (await pg.memoryHistory(id)).items;
    const merge = history.find((event) => event.event === "merged");
    expect(merge, JSON.stringify(history)).toBeDefined();
    await record("undoEvent", () => pg.undoEvent(id, merge?.id ?? ""));
    await record("orgSettings", () => pg.orgSettings());
    await record("setOrgSettings", () => pg.setOrgSettings({ on_duplicate: "merge" }));
    await record("search", () => pg.search("y", { filters: { agent_id: who } }));
    await record("hotSet", () => pg.hotSet(who));
    await record("feedback", () => pg.feedback({ [id]: true, [randomUUID()]: false }));
    await record("putDirective", () => pg.putDirective(who, "c"));
    await record("getDirective", () => pg.getDirective(who));
    await record("assemble", () => pg.assemble(who, "y", { max_context_tokens: 1000 }));
    await record("deleteDirective", () => pg.deleteDirective(who));
    const exported: ExportLine[] = [];
    await record("export", async () => { for await (const line of pg.export(who)) exported.push(line); });
    await record("importLines", async () => expect((await pg.importLines(exported)).existing.memory).toBeGreaterThan(0));
    await record("deleteMemory", () => pg.deleteMemory(id));
    await record("eraseAgent", () => pg.eraseAgent(who));
    await record("ingestDocuments", () => pg.ingestDocuments([{ path: "a.py", content: "x = 1\n" }], { collection }));
    await record("listDocuments", () => pg.listDocuments({ collection }));
    await record("documentsIndex", () => pg.documentsIndex());
    await record("deleteDocuments", () => pg.deleteDocuments(["a.py"], { collection }));
    const chat = agent("chat");
    await record("appendMessages", () => pg.appendMessages(chat, [{ content: "hi", role: "user", message_id: "m1" }]));
    await record("listMessages", () => pg.listMessages(chat, { limit: 10 }));
    await record("getConversation", () => pg.getConversation(chat));
    await record("truncateConversation", () => pg.truncateConversation(chat, 2));
    await record("listConversations", () => pg.listConversations({ limit: 10 }));
    await record("deleteConversation", () => pg.deleteConversation(chat));

    for (const { verb, path, method } of Object.values(OPERATIONS)) {
      if (method === null) continue;
      const request = sent.get(method);
      expect(request?.verb, method).toBe(verb);
      expect(request?.path, method).toMatch(template(path));
    }
  });
});
