"""Knowledge updates: timelines of keyed facts written out of order, checked through the API.

    python benchmarks/knowledge_updates.py [--keys 200] [--values 6] [--late 0.3] [--writers 8] [--seed 11]

Builds ``--keys`` timelines (a person's city, employer, phone plan, ...), each of ``--values`` values
with event times (``occurred_at``) a few weeks apart, and writes every value through POST
/v1/memories with its key, in a shuffled order in which a share (``--late``) arrives after a newer
value of its key. Then checks, through the API only:

* the current value: for every key, list (default: current only) holds exactly one memory of it,
  the value with the newest event time;
* ``as_of``: for every key, at a time inside each value's interval and before the first one, list
  with ``as_of`` answers exactly that value (nothing before the first);
* concurrent writers: for ``--keys // 10`` more keys, ``--writers`` requests at once each write one
  value; exactly one current memory per key, the newest by event time.

Prints the three rates (1.000 means every check passed) and the counts. Deterministic (seeded);
needs no timing. With no PGCONTEXT_DATABASE_URL / DATABASE_URL it starts embedded Postgres and Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import app_client, new_tenant, servers
from service.logs import configure as configure_logs
from service.settings import load_settings

SUBJECTS = ["Ana", "Ben", "Chen", "Dara", "Eli", "Femi", "Gus", "Hana", "Ivo", "Jade", "Kai", "Lea"]
ATTRIBUTES = {
    "city": ["Lisbon", "Porto", "Madrid", "Berlin", "Oslo", "Lyon", "Turin", "Ghent", "Cork", "Riga"],
    "employer": ["Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Stark", "Wayne", "Wonka", "Tyrell"],
    "phone_plan": ["Basic", "Plus", "Max", "Family", "Travel", "Student", "Senior", "Data", "Unlimited", "Prepaid"],
    "car": ["Corolla", "Golf", "Model 3", "Civic", "Clio", "Fiesta", "Leaf", "Mini", "Panda", "Octavia"],
}
START = datetime(2022, 1, 1, tzinfo=UTC)


def timelines(keys: int, values: int, rng: random.Random) -> dict[str, list[tuple[datetime, str]]]:
    out: dict[str, list[tuple[datetime, str]]] = {}
    for k in range(keys):
        subject, attribute = SUBJECTS[k % len(SUBJECTS)], list(ATTRIBUTES)[k % len(ATTRIBUTES)]
        at = START + timedelta(days=rng.randint(0, 300))
        picks = rng.sample(ATTRIBUTES[attribute], values)
        line = []
        for value in picks:
            line.append((at, f"{subject}'s {attribute.replace('_', ' ')} is {value} (timeline {k})."))
            at += timedelta(days=rng.randint(7, 60), minutes=rng.randint(0, 1000))
        out[f"kb{k}.{subject.lower()}.{attribute}"] = line
    return out


def arrival_order(lines: dict[str, list[tuple[datetime, str]]], late: float,
                  rng: random.Random) -> list[tuple[str, datetime, str]]:
    """Every value once; a ``late`` share of them moved after the key's newer values."""
    writes: list[tuple[str, datetime, str]] = []
    for key, line in lines.items():
        order = list(line)
        for i in range(len(order) - 1):
            if rng.random() < late:  # this value arrives after the next one
                order[i], order[i + 1] = order[i + 1], order[i]
        writes += [(key, at, text) for at, text in order]
    # Interleave keys while keeping each key's (shuffled) order.
    queues = {key: [w for w in writes if w[0] == key] for key in lines}
    merged: list[tuple[str, datetime, str]] = []
    while queues:
        key = rng.choice(sorted(queues))
        merged.append(queues[key].pop(0))
        if not queues[key]:
            del queues[key]
    return merged


async def current_of(client: Any, headers: dict[str, str], agent: str, **params: str) -> dict[str, list[str]]:
    """Listed memories by key (every page)."""
    by_key: dict[str, list[str]] = {}
    cursor = None
    while True:
        query = {"agent_id": agent, "limit": 200, **params, **({"cursor": cursor} if cursor else {})}
        r = await client.get("/v1/memories", params=query, headers=headers)
        r.raise_for_status()
        page = r.json()
        for m in page["items"]:
            by_key.setdefault(m["key"], []).append(m["text"])
        cursor = page["next_cursor"]
        if cursor is None:
            return by_key


async def run(args: argparse.Namespace, owner_dsn: str, redis_url: str) -> None:
    rng = random.Random(args.seed)
    lines = timelines(args.keys, args.values, rng)
    writes = arrival_order(lines, args.late, rng)
    late = sum(1 for i, (key, at, _) in enumerate(writes)
               if any(k == key and a > at for k, a, _ in writes[:i]))
    agent = "kb"
    async with app_client(load_settings(), owner_dsn, redis_url) as client:
        _, headers = await new_tenant(owner_dsn, f"knowledge-updates-{args.seed}")
        for key, at, text in writes:
            r = await client.post("/v1/memories", headers=headers, json={
                "text": text, "agent_id": agent, "key": key, "occurred_at": at.isoformat()})
            r.raise_for_status()

        listed = await current_of(client, headers, agent)
        current_ok = sum(listed.get(key) == [line[-1][1]] for key, line in lines.items())

        as_of_checks = as_of_ok = 0
        for key, line in lines.items():
            probes: list[tuple[datetime, str | None]] = [(line[0][0] - timedelta(days=1), None)]
            probes += [(at + (line[i + 1][0] - at) / 2 if i + 1 < len(line) else at + timedelta(days=30), text)
                       for i, (at, text) in enumerate(line)]
            for when, expected in probes:
                got = await current_of(client, headers, agent, as_of=when.isoformat())
                as_of_checks += 1
                as_of_ok += got.get(key, []) == ([] if expected is None else [expected])

        racing = {f"race{k}.{SUBJECTS[k % len(SUBJECTS)].lower()}.city": [
            (START + timedelta(days=i, minutes=k), f"Racer {k} moved to city number {i}.")
            for i in range(args.writers)] for k in range(max(1, args.keys // 10))}
        for key, line in racing.items():
            await asyncio.gather(*(client.post("/v1/memories", headers=headers, json={
                "text": text, "agent_id": "race", "key": key, "occurred_at": at.isoformat()}) for at, text in line))
        raced = await current_of(client, headers, "race")
        race_ok = sum(raced.get(key) == [line[-1][1]] for key, line in racing.items())

    print(f"knowledge updates: {len(lines)} keys x {args.values} values = {len(writes)} writes, {late} of them "
          f"late (a newer value of their key already written), seed {args.seed}")
    print(f"current value is the only current memory: {current_ok / len(lines):.3f} ({current_ok}/{len(lines)})")
    print(f"as_of answers match the timeline: {as_of_ok / as_of_checks:.3f} ({as_of_ok}/{as_of_checks})")
    print(f"{args.writers} concurrent writers per key end with exactly one current memory, the newest: "
          f"{race_ok / len(racing):.3f} ({race_ok}/{len(racing)} keys)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--values", type=int, default=6)
    parser.add_argument("--late", type=float, default=0.3)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    configure_logs("warning")
    with servers(load_settings()) as (owner_dsn, redis_url):
        asyncio.run(run(args, owner_dsn, redis_url))


if __name__ == "__main__":
    main()
