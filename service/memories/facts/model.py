"""The consolidation's model: one OpenAI-compatible chat completion per job, answered as strict JSON."""

from __future__ import annotations

from typing import Literal
from uuid import UUID

import httpx
import msgspec

from service.settings import FactSettings

Decision = Literal["add", "merge", "supersede", "nothing"]

SYSTEM = (
    "You keep an assistant's memory of facts true. You get one NEW fact and a few EXISTING facts about the same "
    "person or thing. Decide what the NEW fact does to them and answer with JSON only: "
    '{"decision": "add" | "merge" | "supersede" | "nothing", "target": "<id of an EXISTING fact or null>", '
    '"reason": "<one short sentence>"}. '
    "merge: NEW says the same as the target (same meaning, other words). "
    "supersede: NEW replaces the target, which is no longer true (a change: moved, switched, now prefers...). "
    "add: NEW is a different fact; keep both. nothing: unsure; change nothing. "
    "Numbers, names, dates and negations that differ mean different facts, never merge."
)


class ModelError(Exception):
    """The model could not be asked, or did not answer as told (the job is retried)."""


class Verdict(msgspec.Struct, forbid_unknown_fields=False):
    decision: Decision
    target: UUID | None = None
    reason: str = ""


class Candidate(msgspec.Struct):
    id: UUID
    text: str
    occurred_at: str


class ChatModel:
    def __init__(self, settings: FactSettings, client: httpx.AsyncClient | None = None) -> None:
        assert settings.consolidation_api_base is not None
        self.settings = settings
        self.url = settings.consolidation_api_base.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {settings.consolidation_api_key}"} if settings.consolidation_api_key \
            else {}
        self.client = client or httpx.AsyncClient(timeout=settings.consolidation_timeout_s, headers=headers)

    async def decide(self, new_text: str, new_at: str, candidates: list[Candidate]) -> Verdict:
        existing = "\n".join(f"- id {c.id} (from {c.occurred_at}): {c.text}" for c in candidates)
        body = {"model": self.settings.consolidation_model, "temperature": 0,
                "response_format": {"type": "json_object"},
                "messages": [{"role": "system", "content": SYSTEM},
                             {"role": "user", "content": f"NEW (from {new_at}): {new_text}\nEXISTING:\n{existing}"}]}
        try:
            response = await self.client.post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise ModelError(f"the model endpoint failed: {exc!r}") from exc
        if response.status_code != 200:
            raise ModelError(f"the model endpoint answered {response.status_code}: {response.text[:200]}")
        try:
            content = response.json()["choices"][0]["message"]["content"]
            verdict = msgspec.json.decode(content.strip().removeprefix("```json").removesuffix("```"), type=Verdict)
        except (ValueError, KeyError, IndexError, TypeError, msgspec.DecodeError) as exc:
            raise ModelError(f"the model's answer is not the JSON asked for: {exc}") from exc
        ids = {c.id for c in candidates}
        if verdict.decision in ("merge", "supersede") and verdict.target not in ids:
            raise ModelError(f"the model named {verdict.target}, not one of the existing facts")
        return verdict

    async def aclose(self) -> None:
        await self.client.aclose()
