/**
 * Names for the API's request and answer types, all taken from the generated `schema.ts` (so they
 * follow the service's OpenAPI schema; nothing here is written by hand but the names and the few
 * conveniences the client adds, such as `metadata` as an object in `listMemories`).
 */

import type { components, operations } from "./schema.js";

type Schemas = components["schemas"];
type Query<O extends keyof operations> = NonNullable<operations[O]["parameters"]["query"]>;

// Requests
export type MemoryIn = Schemas["MemoryIn"];
export type MemoryPatch = Schemas["MemoryPatch"];
export type FeedbackItem = Schemas["FeedbackItem"];
export type SearchRequest = Schemas["SearchRequest"];
export type SearchFilters = Schemas["SearchFilters"];
export type SearchTuning = Schemas["SearchTuning"];
export type Strategy = NonNullable<SearchRequest["strategy"]>;
export type Mode = Schemas["ModeRank"]["mode"];
/** The assembly request's fields (the schema also states "give `max_context_tokens` or `selective: true`"). */
export type AssembleRequest = Extract<Schemas["AssembleRequest"], { agent_id: string }>;
export type AssembleFilters = Schemas["AssembleFilters"];
export type RetrievalOptions = Schemas["RetrievalOptions"];
export type Message = Schemas["Message"];
export type FileIn = Schemas["FileIn"];
export type IngestRequest = Schemas["IngestRequest"];
export type MessageIn = Schemas["MessageIn"];
export type AppendRequest = Schemas["AppendIn"];

// Answers
export type Memory = Schemas["MemoryOut"];
export type PatchedMemory = Schemas["PatchedMemory"];
export type HistoryEvent = Schemas["HistoryEvent"];
export type HistoryPage = Schemas["HistoryPage"];
export type UndoResult = Schemas["UndoResult"];
export type OrgSettings = Schemas["OrgSettingsOut"];
export type OrgSettingsIn = Schemas["OrgSettingsIn"];
export type MemoryPage = Schemas["MemoryPage"];
export type CreatedMemories = Schemas["CreatedMemories"];
export type DeletedAgentMemories = Schemas["DeletedAgentMemories"];
export type HotMemory = Schemas["HotMemoryOut"];
export type HotSet = Schemas["HotSetOut"];
export type FeedbackOut = Schemas["FeedbackOut"];
export type SearchResponse = Schemas["SearchResponse"];
export type SearchResult = Schemas["SearchResult"];
export type AssembledContext = Schemas["AssembleResponse"];
export type MemoryUsed = Schemas["MemoryUsed"];
export type DroppedMemory = Schemas["DroppedMemory"];
export type Budget = Schemas["BudgetOut"];
export type Scores = Schemas["Scores"];
export type Directive = Schemas["DirectiveOut"];
export type IngestResponse = Schemas["IngestResponse"];
export type Document = Schemas["DocumentOut"];
export type DocumentPage = Schemas["DocumentPage"];
export type DeletedDocuments = Schemas["DeleteResponse"];
export type IndexSummary = Schemas["IndexSummary"];
export type Health = Schemas["Health"];
export type ImportResult = Schemas["ImportResult"];
export type Appended = Schemas["AppendOut"];
export type AppendedMessage = Schemas["AppendedMessage"];
export type ConversationMessage = Schemas["MessageOut"];
export type MessagePage = Schemas["MessagePage"];
export type MessageRef = Schemas["MessageRef"];
export type Conversation = Schemas["ConversationOut"];
export type ConversationPage = Schemas["ConversationPage"];
export type DeletedConversation = Schemas["DeletedConversation"];
export type TruncatedConversation = Schemas["TruncatedConversation"];
export type ErrorBody = Schemas["ErrorBody"];

// Query parameters
/** `GET /v1/memories` filters; `metadata` may be given as an object (sent as JSON). */
export type ListMemoriesQuery = Omit<Query<"V1MemoriesListMemories">, "metadata"> & {
  metadata?: Record<string, unknown> | string;
};
export type ListDocumentsQuery = Query<"V1DocumentsListDocuments">;
export type ListMessagesQuery = Query<"V1ConversationsConversationIdMessagesListMessages">;
export type ListConversationsQuery = Query<"V1ConversationsListConversations">;
/** `deleteConversation` filters: `agent_id`, only that agent's conversation. */
export type DeleteConversationQuery = Query<"V1ConversationsConversationIdRemove">;
/** `truncateConversation` conditions (`message_count`, `last_id`, `agent_id`); `from_position` is its own argument. */
export type TruncateConversationQuery = Omit<Query<"V1ConversationsConversationIdMessagesTruncate">, "from_position">;

/** One line of the NDJSON data-subject export; `type` says which kind (`export`, `memory`, ..., `end`). */
export interface ExportLine {
  type: string;
  [field: string]: unknown;
}
