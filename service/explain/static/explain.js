// pgcontext explain page: plain browser JavaScript, no dependencies, no build step.
// Everything shown comes from the public API, and every value is written with textContent
// (never as markup): memory texts are user data.
"use strict";

const KEY_SLOT = "pgcontext.explain.key"; // sessionStorage only: gone when the tab closes
const SCORE_NAMES = ["relevance", "recency", "usefulness", "informativeness", "uniqueness", "composite"];
const TIMINGS = ["budget_calculation_ms", "directive_load_ms", "hot_memory_retrieval_ms", "cold_memory_retrieval_ms",
                 "ranking_ms", "packing_ms", "formatting_ms", "queued_ms", "total_ms", "deadline_ms"];

const DEGRADATIONS = {
  directive_missing: "the agent's directive could not be read in time: this context lacks its standing instructions",
  directive_unconfirmed: "the directive's read did not answer in time: the copy this instance last read stands in",
  hot_unavailable: "the hot set could not be read",
  cold_unavailable: "the cold search gave no answer",
  retrieval_reduced: "the cold search ran less than planned",
  history_turns_unread: "the conversation's length was not read in time: its last history_turns messages were "
    + "not left out, and may be packed again",
};

const $ = (id) => document.getElementById(id);

// Each view shows the answer to its latest request only: an earlier one that answers later is ignored.
const latest = { assemble: 0, search: 0, history: 0 };
const begin = (view) => ++latest[view];
const isLatest = (view, ticket) => latest[view] === ticket;

// While a view's latest request runs, its form says so beside its button (null: nothing runs). The
// button stays usable: a new request replaces the one in flight.
function working(view, what) {
  const status = $(`${view}-status`);
  status.textContent = what || "";
  status.hidden = !what;
  $(`${view}-form`).setAttribute("aria-busy", String(Boolean(what)));
}

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === undefined || value === null) continue;
    if (name === "text") node.textContent = String(value);
    else if (name === "className") node.className = value;
    else node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmt(value, digits = 3) {
  if (value === null || value === undefined) return "—";
  return typeof value === "number" && !Number.isInteger(value) ? value.toFixed(digits) : String(value);
}

function table(node, headers, rows) {
  node.replaceChildren(
    el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { text: h })))),
    el("tbody", {}, ...rows));
}

function keyValues(node, pairs) {
  node.replaceChildren(el("tbody", {}, ...pairs.map(([k, v]) =>
    el("tr", { "data-key": k }, el("th", { text: k }), el("td", { text: fmt(v) })))));
}

// -- the key ---------------------------------------------------------------------------------------

function apiKey() {
  return sessionStorage.getItem(KEY_SLOT);
}

function showKeyState() {
  const key = apiKey();
  $("key-state").className = "muted";
  $("key-state").textContent = key
    ? "Key set for this tab; it is forgotten when the tab closes."
    : "No key yet: it stays in this tab only (sessionStorage).";
}

function clearResults() {
  // What one org's key brought stays with that key: forgetting it, or using another, clears it, and an
  // answer still on its way is ignored.
  for (const view of Object.keys(latest)) begin(view);
  for (const view of ["assemble", "search"]) working(view, null);
  for (const id of ["assemble-result", "search-result", "history", "assemble-error", "search-error"]) {
    $(id).hidden = true;
  }
  for (const id of ["used", "dropped", "budget", "reasons", "branches", "timings", "context", "results", "degradation",
                    "history-events", "agents"]) {
    $(id).replaceChildren();
  }
}

async function api(method, path, body) {
  const key = apiKey();
  if (!key) throw { code: "no_key", message: "enter an API key first" };
  const response = await fetch(path, {
    method,
    headers: { "Authorization": `Bearer ${key}`, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const payload = await response.json().catch(() => null);
  if (!response.ok) {
    const error = (payload && payload.error) || {};
    throw { status: response.status, code: error.code || `http_${response.status}`,
            message: error.message || response.statusText, request_id: error.request_id,
            retry_after_s: Number(response.headers.get("Retry-After")) || 1 };
  }
  return payload;
}

function showError(node, error) {
  node.hidden = false;
  const where = error.status ? `${error.status} ` : "";
  const rid = error.request_id ? ` (request ${error.request_id})` : "";
  node.textContent = `${where}${error.code || "error"}: ${error.message || error}${rid}`;
}

async function loadAgents() {
  // One page of the org's memories is enough to suggest agent ids; typing any id works too. It is also
  // the first use of the key: a key the service rejects is said so at once, and not kept.
  try {
    const page = await api("GET", "/v1/memories?limit=200");
    const agents = [...new Set(page.items.map((m) => m.agent_id).filter(Boolean))].sort();
    $("agents").replaceChildren(...agents.map((a) => el("option", { value: a })));
  } catch (error) {
    $("agents").replaceChildren();
    if (error.status === 401) {
      sessionStorage.removeItem(KEY_SLOT);
      $("key-state").textContent = `The service rejected this key (${error.message || error.code}); enter another.`;
      $("key-state").className = "error-text";
    }
  }
}

// -- facts: each memory's lifecycle, and its history -------------------------------------------------

const FACT_LOOKUPS = 100; // memories looked up per table and rendering (GET /v1/memories/{id})
const FACT_WORKERS = 3; // lookups in flight at once: fewer than an org may have in flight on one core (4)
const FACT_RETRIES = 3; // a lookup refused with 429 is tried again after its Retry-After (at most 5 s)

const pause = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

function day(value) {
  return value ? String(value).slice(0, 10) : "now";
}

function factCell(id) {
  return el("td", { className: "fact", "data-field": "fact", "data-fact-for": id });
}

function renderFact(cell, memory, failure) {
  const id = cell.dataset.factFor;
  const parts = [];
  if (failure) {
    // Not a lookup that found nothing: say why, so a refusal is not read as a memory that is gone.
    parts.push(el("span", { className: "fact-failed", "data-fact": "status",
                            text: `not read: ${[failure.status, failure.code || "error"].filter(Boolean).join(" ")}`,
                            title: failure.message || undefined }));
  } else if (!memory) {
    parts.push(el("span", { className: "muted", "data-fact": "status", text: "—",
                            title: "no such memory: deleted since" }));
  } else {
    const ended = memory.valid_until && new Date(memory.valid_until) <= new Date();
    const status = !memory.current ? "superseded" : ended ? "ended" : "current";
    parts.push(el("span", { className: `fact-status fact-${status}`, "data-fact": "status",
                            text: memory.superseded_by ? `superseded by ${memory.superseded_by.slice(-8)}` : status,
                            title: memory.superseded_by || undefined }));
    parts.push(el("span", { "data-fact": "valid",
                            text: `valid ${day(memory.valid_from || memory.occurred_at)} → ${day(memory.valid_until)}` }));
    if (memory.key) parts.push(el("span", { "data-fact": "key", text: `key ${memory.key}` }));
    parts.push(el("span", { "data-fact": "seen", text: `seen ${memory.seen_count}×`,
                            title: memory.last_seen_at ? `last ${memory.last_seen_at}` : undefined }));
  }
  const open = el("button", { type: "button", className: "link", "data-action": "history", text: "history" });
  open.addEventListener("click", () => openHistory(id));
  cell.replaceChildren(...parts, open);
}

async function lookUpMemory(id) {
  // The record, null when there is none (gone since, or not a memory of this org), or why it was not read.
  for (let attempt = 0; ; attempt += 1) {
    try {
      return { memory: await api("GET", `/v1/memories/${encodeURIComponent(id)}`) };
    } catch (error) {
      if (error.status === 404) return { memory: null };
      if (error.status !== 429 || attempt >= FACT_RETRIES) return { memory: null, failure: error };
      await pause(Math.min(error.retry_after_s, 5) * 1000 * (1 + Math.random())); // apart, not all at once
    }
  }
}

async function fillFacts(...tables) {
  // The assembly and search answers carry ids and scores; each memory's lifecycle comes from its record.
  // One queue for the tables of a view; rendering them again stops the earlier lookups, and
  // data-facts-loaded marks the latest rendering's as done.
  const run = String(Number(tables[0].dataset.factsRun || 0) + 1);
  for (const node of tables) {
    node.dataset.factsRun = run;
    delete node.dataset.factsLoaded;
  }
  const latestRun = () => tables.every((node) => node.dataset.factsRun === run);
  const queue = [];
  for (const node of tables) {
    const cells = [...node.querySelectorAll("td[data-fact-for]")];
    queue.push(...cells.slice(0, FACT_LOOKUPS));
    for (const cell of cells.slice(FACT_LOOKUPS)) {
      renderFact(cell, null, { code: `past the first ${FACT_LOOKUPS} rows`, message: "its history still opens" });
    }
  }
  const worker = async () => {
    for (let cell = queue.shift(); cell && latestRun(); cell = queue.shift()) {
      const { memory, failure } = await lookUpMemory(cell.dataset.factFor);
      renderFact(cell, memory, failure);
    }
  };
  await Promise.all(Array.from({ length: FACT_WORKERS }, worker));
  if (latestRun()) for (const node of tables) node.dataset.factsLoaded = "true";
}

function summarize(detail) {
  const text = JSON.stringify(detail || {});
  return text === "{}" ? "" : text.length > 400 ? `${text.slice(0, 400)}…` : text;
}

async function openHistory(id) {
  const ticket = begin("history");
  $("history-id").textContent = id;
  $("history-error").hidden = true;
  $("history-events").replaceChildren();
  $("history").hidden = false;
  const events = [];
  try {
    let cursor = null;
    do {
      const page = await api("GET", `/v1/memories/${encodeURIComponent(id)}/history?limit=100`
        + (cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""));
      events.push(...page.items);
      cursor = page.next_cursor;
    } while (cursor && events.length < 1000 && isLatest("history", ticket));
  } catch (error) {
    if (isLatest("history", ticket)) showError($("history-error"), error);
  }
  if (!isLatest("history", ticket)) return;
  table($("history-events"), ["#", "at", "event", "related", "undone by", "detail"],
    events.map((e, i) => el("tr", { "data-event": e.event, "data-id": e.id },
      el("td", { text: i + 1 }),
      el("td", { text: e.at }),
      el("td", {}, el("span", { className: `event event-${e.event}`, "data-field": "event", text: e.event })),
      el("td", { text: fmt(e.related_id) }),
      el("td", { text: fmt(e.undone_by) }),
      el("td", { className: "why", "data-field": "detail", text: summarize(e.detail) }))));
  $("history").scrollIntoView({ block: "nearest" });
}

// -- assemble --------------------------------------------------------------------------------------

function assembleRequest() {
  const mode = document.querySelector("input[name=mode]:checked").value;
  const body = {
    agent_id: $("agent").value.trim(),
    query: $("query").value,
    model: $("model").value.trim(),
    retrieval: { strategy: $("strategy").value },
    explain: true,
  };
  if (mode !== "fixed") body.selective = true;
  if (mode !== "selective") body.max_context_tokens = Number($("max-tokens").value);
  if ($("reserve-tokens").value !== "") body.reserve_tokens = Number($("reserve-tokens").value);
  if ($("deadline").value !== "") body.timeout_ms = Number($("deadline").value); // empty: the service's
  if ($("conversation").value.trim()) body.conversation_id = $("conversation").value.trim();
  if ($("history-turns").value !== "") body.history_turns = Number($("history-turns").value);
  const messages = $("messages").value.split("\n").map((line) => line.trim()).filter(Boolean);
  if (messages.length) {
    // "role: content" when the line opens with one word and a colon; any other line is the user's own
    // ("Is the 10:30 meeting on?" is not said by "Is the 10").
    body.recent_messages = messages.map((line) => {
      const said = /^([^\s:]{1,64}):(?!\/\/)\s*(.*)$/.exec(line);
      return said ? { role: said[1], content: said[2] } : { role: "user", content: line };
    });
  }
  return body;
}

// -- sources: memories, a conversation's messages, document chunks ---------------------------------

function sourceOf(item) {
  if (item.message) return "message";
  return item.kind === "document_chunk" || item.source || item.path ? "document" : "memory";
}

function said(item) {
  // Who said a message, in which session, and where it stands in its conversation; a document chunk's
  // file and lines.
  const message = item.message;
  const path = item.path || item.source;
  if (!message) return !path ? "—" : item.line_start ? `${path}:${item.line_start}-${item.line_end}` : path;
  const who = message.speaker || message.role || "?";
  const session = message.session_id ? ` · session ${message.session_id}` : "";
  return `${who}${session} · #${message.position} of ${message.conversation_id}`;
}

function applySources(fieldset, ...tables) {
  const shown = new Set([...fieldset.querySelectorAll("input:checked")].map((box) => box.value));
  for (const node of tables) {
    for (const row of node.querySelectorAll("tbody tr[data-source]")) row.hidden = !shown.has(row.dataset.source);
  }
}

function scoreCells(scores) {
  const show = (v) => (typeof v === "number" ? v.toFixed(3) : "—");
  return SCORE_NAMES.map((name) => el("td", { className: "num", "data-score": name, text: show(scores && scores[name]) }));
}

function renderDegradation(r) {
  // What the context lacks of what was planned: a level of L0 can still miss the directive or history turns.
  const reasons = r.degradation_reasons || [];
  $("degradation").replaceChildren(...reasons.map((reason) => el("li", { "data-reason": reason },
    el("code", { text: reason }), ": ", DEGRADATIONS[reason] || "see the API reference",
    reason === "retrieval_reduced" && r.retrieval ? ` (${r.retrieval.reason}: planned ${r.retrieval.planned}, `
      + `ran ${fmt(r.retrieval.ran)})` : "")));
  $("degradation").hidden = !reasons.length;
}

function renderAssembly(r) {
  $("level").textContent = r.degradation_level;
  $("level").className = `badge level-${r.degradation_level}`;
  $("level").title = r.degradation_reasons && r.degradation_reasons.length
    ? `incomplete: ${r.degradation_reasons.join(", ")}` : "complete";
  renderDegradation(r);
  $("sources").textContent = `sources: ${r.sources_available.join(", ") || "none"}`;
  $("totals").textContent = `${fmt(r.metrics.total_ms, 1)} ms · ${r.metrics.candidates_evaluated} candidates · `
    + `${r.memories_used.length} packed · ${r.dropped.length} dropped`;

  table($("used"), ["#", "memory", "fact", "said", "origin", "tokens", ...SCORE_NAMES, "justification"],
    r.memories_used.map((m) => el("tr", { "data-id": m.id, "data-source": sourceOf(m) },
      el("td", { text: m.tag }),
      el("td", { className: "text", "data-field": "text", text: m.text }),
      factCell(m.id),
      el("td", { className: "why", "data-field": "said", text: said(m) }),
      el("td", { text: m.origin + (m.in_hot_and_cold ? " + cold" : "") }),
      el("td", { className: "num", text: m.tokens }),
      ...scoreCells(m.scores),
      el("td", { className: "why", "data-field": "justification", text: m.justification }))));
  if (!r.memories_used.length) table($("used"), ["nothing was packed"], []);

  table($("dropped"), ["memory", "fact", "said", "reason", "detail", "tokens", ...SCORE_NAMES],
    r.dropped.map((d) => el("tr", { "data-id": d.id, "data-source": sourceOf(d) },
      el("td", { className: "text", "data-field": "text", text: d.text ?? d.id }),
      factCell(d.id),
      el("td", { className: "why", "data-field": "said", text: said(d) }),
      el("td", {}, el("span", { className: `reason reason-${d.reason}`, "data-field": "reason", text: d.reason })),
      el("td", { className: "why", text: d.detail }),
      el("td", { className: "num", text: d.tokens }),
      // A turn already in the history is left out before ranking: it has no scores to show.
      ...scoreCells(d.reason === "in_history" ? null : (d.scores || { composite: d.composite })))));
  if (!r.dropped.length) table($("dropped"), ["nothing was dropped"], []);

  const b = r.budget;
  keyValues($("budget"), [
    ["mode", b.mode], ["model_family", b.model_family], ["encoding", b.encoding], ["safety_factor", b.safety_factor],
    ["max_context_tokens", b.max_context_tokens], ["reserve_tokens", b.reserve_tokens],
    ["directive_tokens", b.directive_tokens], ["history_tokens", b.history_tokens],
    ["overhead_tokens", b.overhead_tokens], ["memories_budget_tokens", b.memories_budget_tokens],
    ["memories_tokens", b.memories_tokens], ["tag_tokens", b.tag_tokens], ["context_tokens", b.context_tokens],
    ["history_messages", b.history_messages], ["history_messages_dropped", b.history_messages_dropped],
    ["intent", b.intent], ["complexity", b.complexity], ["tier", b.tier], ["multiplier", b.multiplier],
  ]);
  const reasons = [...b.reasons];
  if (b.max_context_tokens !== null) {
    const room = b.max_context_tokens - b.directive_tokens - b.history_tokens - b.reserve_tokens - b.overhead_tokens;
    reasons.push(`window ${b.max_context_tokens} − directive ${b.directive_tokens} − history ${b.history_tokens}`
      + ` − reserve ${b.reserve_tokens} − envelope ${b.overhead_tokens} = ${room} tokens for memories`
      + (b.mode === "selective" ? ` (the smaller of this and the selective budget wins: ${b.memories_budget_tokens})` : ""));
  }
  reasons.push(`memories took ${b.memories_tokens} of ${b.memories_budget_tokens} tokens (${b.tag_tokens} of them tags);`
    + ` the context is ${b.context_tokens} ${b.encoding} tokens`);
  $("reasons").replaceChildren(...reasons.map((reason) => el("li", { text: reason })));

  table($("branches"), ["branch", "outcome", "ms", "count", "source", "detail"],
    ["directive", "hot", "cold"].map((name) => {
      const br = r.branches[name];
      return el("tr", { "data-branch": name },
        el("td", { text: name }),
        el("td", {}, el("span", { className: `outcome outcome-${br.outcome}`, text: br.outcome })),
        el("td", { className: "num", text: fmt(br.ms, 1) }),
        el("td", { className: "num", text: fmt(br.count) }),
        el("td", { text: fmt(br.source) }),
        el("td", { className: "why", text: br.detail || "" }));
    }));

  keyValues($("timings"), [...TIMINGS.map((name) => [name, r.metrics[name]]),
                           ["candidates_evaluated", r.metrics.candidates_evaluated]]);
  $("context").textContent = r.context;
  applySources(document.querySelector("#assemble-result .sources"), $("used"), $("dropped"));
  $("assemble-result").hidden = false;
  fillFacts($("used"), $("dropped"));
}

async function run(view, what, path, body, render) {
  // POST a view's request and show its answer or error, unless a later request of the view has begun.
  const ticket = begin(view);
  $(`${view}-error`).hidden = true;
  working(view, what);
  try {
    const answer = await api("POST", path, body);
    if (isLatest(view, ticket)) render(answer);
  } catch (error) {
    if (!isLatest(view, ticket)) return;
    $(`${view}-result`).hidden = true;
    showError($(`${view}-error`), error);
  } finally {
    if (isLatest(view, ticket)) working(view, null);
  }
}

function runAssemble(event) {
  event.preventDefault();
  const body = assembleRequest();
  const deadline = body.timeout_ms ? `deadline ${body.timeout_ms} ms` : "the service's deadline";
  return run("assemble", `Assembling… (${deadline})`, "/v1/context/assemble", body, renderAssembly);
}

// -- search ----------------------------------------------------------------------------------------

function renderSearch(r) {
  const m = r.metrics;
  $("search-summary").textContent = `strategy ${r.strategy} (asked ${r.requested_strategy}): ${r.reason}`
    + (r.fallback_reason ? ` · fallback: ${r.fallback_reason}` : "")
    + ` · ${fmt(m.total_ms, 1)} ms (lexical ${fmt(m.lexical_ms, 1)}, semantic ${fmt(m.semantic_ms, 1)},`
    + ` fusion ${fmt(m.fusion_ms, 1)}) · candidates lexical ${fmt(m.lexical_candidates)}, semantic ${fmt(m.semantic_candidates)}`;
  table($("results"), ["#", "memory", "fact", "said", "agent", "kind", "final score", "lexical rank", "lexical score",
                       "semantic rank", "semantic score", "fusion"],
    r.results.map((hit, i) => el("tr", { "data-id": hit.id, "data-current": String(hit.current !== false),
                                         "data-source": sourceOf(hit) },
      el("td", { text: i + 1 }),
      el("td", { className: "text", "data-field": "text", text: hit.text }),
      factCell(hit.id),
      el("td", { className: "why", "data-field": "said", text: said(hit) }),
      el("td", { text: fmt(hit.agent_id) }),
      el("td", { text: hit.kind }),
      el("td", { className: "num", "data-field": "final_score", text: fmt(hit.final_score) }),
      el("td", { className: "num", "data-field": "lexical_rank", text: fmt(hit.lexical_rank) }),
      el("td", { className: "num", text: fmt(hit.lexical_score) }),
      el("td", { className: "num", "data-field": "semantic_rank", text: fmt(hit.semantic_rank) }),
      el("td", { className: "num", text: fmt(hit.semantic_score) }),
      el("td", { text: hit.fusion_method }))));
  applySources(document.querySelector("#search-result .sources"), $("results"));
  $("search-result").hidden = false;
  fillFacts($("results"));
}

function runSearch(event) {
  event.preventDefault();
  const agent = $("search-agent").value.trim();
  const body = { query: $("search-query").value, strategy: $("search-strategy").value,
                 limit: Number($("search-limit").value) };
  const filters = {};
  if (agent) filters.agent_id = agent;
  if ($("search-include-superseded").checked) filters.include_superseded = true;
  if ($("search-as-of").value.trim()) filters.as_of = $("search-as-of").value.trim();
  if (Object.keys(filters).length) body.filters = filters;
  return run("search", "Searching…", "/v1/memories/search", body, renderSearch);
}

// -- wiring ----------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (key && key !== apiKey()) clearResults();
    if (key) sessionStorage.setItem(KEY_SLOT, key);
    $("api-key").value = "";
    showKeyState();
    loadAgents();
  });
  $("forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_SLOT);
    clearResults();
    showKeyState();
  });
  for (const tab of document.querySelectorAll(".tab")) {
    tab.addEventListener("click", () => {
      for (const other of document.querySelectorAll(".tab")) other.classList.toggle("active", other === tab);
      for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== tab.dataset.tab;
    });
  }
  const syncBudget = () => {
    $("max-tokens").disabled = document.querySelector("input[name=mode]:checked").value === "selective";
  };
  for (const radio of document.querySelectorAll("input[name=mode]")) radio.addEventListener("change", syncBudget);
  for (const [fieldset, tables] of [["#assemble-result .sources", ["used", "dropped"]],
                                    ["#search-result .sources", ["results"]]]) {
    const node = document.querySelector(fieldset);
    node.addEventListener("change", () => applySources(node, ...tables.map($)));
  }
  $("assemble-form").addEventListener("submit", runAssemble);
  $("search-form").addEventListener("submit", runSearch);
  $("history-close").addEventListener("click", () => { $("history").hidden = true; });
  showKeyState();
  if (apiKey()) loadAgents();
});
