"""Duplicate-detection quality on a labelled set built by rules from LoCoMo turns and SciFact sentences.

    python benchmarks/dedup_eval.py ../shared/data/locomo-dev ../shared/data/scifact [--sources 1000] [--seed 7]

Every pair is (a stored sentence, a new write). Positives are the same fact re-written by one rule:
case, punctuation, whitespace, filler words, contractions, clause order, or a synonym from a fixed
hand-written list (not WordNet, which the detector uses). Negatives are the same sentence with its
meaning changed by one rule -- a number, a name, a date, a negation, a different object -- and the
sentence's nearest neighbour in its corpus (by the service's own embedding). Deterministic (seeded);
no model writes anything.

Each pair is judged by the function the write path calls (``service.memories.facts.similarity.compare``) on the
service's embeddings. Sources are split in two by the seed: thresholds are tuned on the first half
(highest recall with false merges <= 0.5% of negatives) and every figure is reported on the second.
Prints recall per rewrite, false merges per change, and the held-out totals with the service's
defaults and with the tuned pick.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import cached_embeddings
from service.memories.facts.normalize import tokens
from service.memories.facts.similarity import Thresholds, compare
from service.settings import FactSettings, load_settings

# A fixed list of everyday synonym pairs for the positives (the detector's own lexicon is WordNet's).
SYNONYMS = [
    ("big", "large"), ("small", "little"), ("buy", "purchase"), ("bought", "purchased"), ("start", "begin"),
    ("started", "began"), ("movie", "film"), ("movies", "films"), ("kids", "children"), ("kid", "child"),
    ("car", "automobile"), ("store", "shop"), ("quick", "fast"), ("quickly", "rapidly"), ("help", "assist"),
    ("helped", "assisted"), ("job", "occupation"), ("begin", "commence"), ("end", "finish"), ("ended", "finished"),
    ("show", "demonstrate"), ("shows", "demonstrates"), ("showed", "demonstrated"), ("reduce", "decrease"),
    ("reduced", "decreased"), ("increase", "raise"), ("increased", "raised"), ("important", "significant"),
    ("often", "frequently"), ("maybe", "perhaps"), ("happy", "glad"), ("sad", "unhappy"), ("trip", "journey"),
    ("gift", "present"), ("talk", "speak"), ("talked", "spoke"), ("picture", "photo"), ("pictures", "photos"),
    ("house", "home"), ("enough", "sufficient"), ("hard", "difficult"), ("easy", "simple"), ("smart", "clever"),
    ("friend", "pal"), ("use", "utilize"), ("used", "utilized"), ("need", "require"), ("needed", "required"),
    ("try", "attempt"), ("tried", "attempted"), ("get", "obtain"), ("got", "obtained"), ("find", "discover"),
    ("found", "discovered"), ("look", "appear"), ("looks", "appears"), ("however", "nevertheless"),
    ("also", "too"), ("mostly", "largely"), ("study", "investigation"), ("studies", "investigations"),
    ("method", "technique"), ("methods", "techniques"), ("result", "outcome"), ("results", "outcomes"),
    ("patients", "patients"), ("disease", "illness"), ("risk", "danger"), ("cause", "induce"),
    ("caused", "induced"), ("amazing", "incredible"), ("awesome", "great"), ("great", "terrific"),
    ("pretty", "beautiful"), ("beautiful", "lovely"), ("scared", "afraid"), ("tired", "exhausted"),
    ("glad", "happy"), ("fun", "enjoyable"), ("hobby", "pastime"), ("town", "city"), ("went", "traveled"),
    ("talking", "speaking"), ("learn", "study"), ("learned", "studied"), ("chose", "picked"),
    ("choose", "pick"), ("mom", "mother"), ("dad", "father"), ("kind", "type"), ("powerful", "strong"),
    ("speak", "talk"), ("rapid", "fast"), ("correct", "right"), ("precise", "exact"), ("near", "close"),
]
FILLERS = ["Basically, ", "Honestly, ", "Actually, ", "Um, ", "You know, ", "Well, basically, ", "Literally, "]
CONTRACT = [("do not", "don't"), ("does not", "doesn't"), ("did not", "didn't"), ("is not", "isn't"),
            ("are not", "aren't"), ("was not", "wasn't"), ("I am", "I'm"), ("it is", "it's"), ("cannot", "can't"),
            ("will not", "won't"), ("I have", "I've"), ("we are", "we're"), ("they are", "they're"),
            ("you are", "you're"), ("that is", "that's"), ("I will", "I'll"), ("I would", "I'd")]
AUX = ["is", "are", "was", "were", "can", "will", "does", "did", "do", "has", "have", "should", "could", "would",
       "may", "might", "must"]
NUMBER_WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve", "twenty"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
NAMES = ["Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Irene", "James", "Karen", "Liam",
         "Maria", "Noah", "Olivia", "Peter", "Rachel", "Sam", "Tina", "Victor"]
STOP = {
    "the", "a", "an", "and", "or", "but", "of", "to", "in", "on", "at", "for", "with", "by", "from", "as", "is",
    "are", "was", "were", "be", "been", "this", "that", "these", "those", "it", "its", "i", "you", "he", "she",
    "we", "they", "my", "your", "our", "their", "me", "him", "her", "them", "what", "which", "who", "whom",
    "when", "where", "why", "how", "not", "no", "so", "very", "just", "really", "have", "has", "had", "do",
    "does", "did", "can", "will", "would", "should", "could", "about", "into", "than", "then", "there", "here",
    "also", "some", "any", "all", "more", "most", "such",
}
CLAUSE_WORDS = ["because", "when", "after", "before", "while", "since", "although", "if"]


@dataclass(frozen=True)
class Pair:
    source: int
    stored: str
    incoming: str
    duplicate: bool
    rule: str


def sentences(locomo: Path, scifact: Path, rng: random.Random, n: int) -> list[str]:
    turns = []
    for line in (locomo / "corpus.jsonl").read_text().splitlines():
        text = re.sub(r"^[A-Z][\w .'-]{0,40}: ", "", json.loads(line)["text"]).strip()
        if 6 <= len(text.split()) <= 40:
            turns.append(text)
    claims = []
    for line in (scifact / "corpus.jsonl").read_text().splitlines():
        for sent in re.split(r"(?<=[.!?])\s+(?=[A-Z])", json.loads(line)["text"]):
            if 8 <= len(sent.split()) <= 40:
                claims.append(sent.strip())
    picked = rng.sample(sorted(set(turns)), n // 2) + rng.sample(sorted(set(claims)), n - n // 2)
    return picked


def _sub_word(text: str, old: str, new: str) -> str | None:
    pattern = re.compile(rf"\b{re.escape(old)}\b", re.IGNORECASE)
    match = pattern.search(text)
    if match is None:
        return None
    found = match.group()
    new = new.capitalize() if found[0].isupper() and not found.isupper() else new
    return text[: match.start()] + new + text[match.end():]


def positives(text: str, rng: random.Random) -> dict[str, str]:
    out: dict[str, str] = {}
    out["case"] = text.lower() if rng.random() < 0.7 else text.upper()
    stripped = re.sub(r"(?<!\d)[^\w\s'&]|[^\w\s'&](?!\d)", "", text)  # not a number's point or colon
    out["punctuation"] = stripped if stripped != text else text.rstrip(".") + "!!"
    words = text.split()
    out["whitespace"] = "  ".join(words[: len(words) // 2]) + " \n " + "\t".join(words[len(words) // 2:]) + "  "
    filler = rng.choice(FILLERS)
    out["filler"] = filler + (text[0].lower() + text[1:] if text.split()[0] not in NAMES and text[:2] != "I " else text)
    for long, short in rng.sample(CONTRACT, len(CONTRACT)):
        for a, b in ((short, long), (long, short)):
            changed = _sub_word(text, a, b)
            if changed is not None:
                out["contraction"] = changed
                break
        if "contraction" in out:
            break
    head, sep, tail = text.rstrip(".!?").partition(", ")
    if sep and len(head.split()) >= 2 and len(tail.split()) >= 3:
        out["clause_order"] = tail[0].upper() + tail[1:] + ", " + head[0].lower() + head[1:] + "."
    else:
        for word in CLAUSE_WORDS:
            m = re.search(rf"^(.{{12,}}?) {word} (.{{8,}}?)[.!?]?$", text)
            if m:
                main, sub = m.group(1), m.group(2)
                out["clause_order"] = f"{word.capitalize()} {sub}, {main[0].lower()}{main[1:]}."
                break
    for a, b in rng.sample(SYNONYMS, len(SYNONYMS)):
        if a == b:
            continue
        changed = _sub_word(text, a, b) or _sub_word(text, b, a)
        if changed is not None:
            out["synonym"] = changed
            break
    return out


def negatives(text: str, rng: random.Random, pool: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    m = re.search(r"\b\d+(?:\.\d+)?\b", text)
    if m:
        value = m.group()
        new = str(int(float(value)) + rng.randint(1, 9)) if "." not in value else f"{float(value) + 1.5:g}"
        out["number"] = text[: m.start()] + new + text[m.end():]
    else:
        for word in NUMBER_WORDS:
            changed = _sub_word(text, word, rng.choice([w for w in NUMBER_WORDS if w != word]))
            if changed:
                out["number"] = changed
                break
    caps = [w for w in re.findall(r"(?<=\s)[A-Z][a-z]{2,}\b", text) if w not in MONTHS + DAYS + ["I"]]
    if caps:
        name = rng.choice(caps)
        out["name"] = _sub_word(text, name, rng.choice([n for n in NAMES if n != name])) or text
    for pool_words in (MONTHS, DAYS):
        for word in pool_words:
            if re.search(rf"\b{word}\b", text):
                out["date"] = text.replace(word, rng.choice([w for w in pool_words if w != word]), 1)
                break
    year = re.search(r"\b(19|20)\d{2}\b", text)
    if "date" not in out and year:
        out["date"] = text[: year.start()] + str(int(year.group()) + rng.randint(1, 5)) + text[year.end():]
    if re.search(r"\bnot\b|n't\b", text):
        out["negation"] = re.sub(r"\s*\bnot\b|n't\b", "", text, count=1)
    else:
        for aux in AUX:
            changed = re.sub(rf"\b{aux}\b", f"{aux} not", text, count=1)
            if changed != text:
                out["negation"] = changed
                break
    content = [w for w in re.findall(r"\b[a-z]{4,}\b", text) if w not in STOP]
    if content:
        target = content[-1]
        choices = [w for w in pool if w != target]
        out["object"] = _sub_word(text, target, rng.choice(choices)) or text
    return {k: v for k, v in out.items() if v != text}


def build(locomo: Path, scifact: Path, n: int, seed: int, settings_dir: Path) -> tuple[list[Pair], int]:
    rng = random.Random(seed)
    texts = sentences(locomo, scifact, rng, n)
    vocab = sorted({w for t in texts for w in re.findall(r"\b[a-z]{4,}\b", t) if w not in STOP})
    pairs: list[Pair] = []
    for i, text in enumerate(texts):
        pairs += [Pair(i, text, rewrite, True, rule) for rule, rewrite in positives(text, rng).items()]
        pairs += [Pair(i, text, changed, False, rule) for rule, changed in negatives(text, rng, vocab).items()]
    emb = embeddings(texts, settings_dir)
    sims = emb @ emb.T
    np.fill_diagonal(sims, -1.0)
    half = n // 2  # nearest neighbours within the same corpus
    for i, text in enumerate(texts):
        lo, hi = (0, half) if i < half else (half, n)
        order = np.argsort(-sims[i, lo:hi]) + lo
        for j in order:
            if tokens(texts[j]) != tokens(text):
                pairs.append(Pair(i, text, texts[int(j)], False, "neighbour"))
                break
    return pairs, n


def embeddings(texts: Sequence[str], cache: Path) -> np.ndarray:
    return np.asarray(cached_embeddings(load_settings(), list(texts), cache, "dedup"), dtype=np.float32)


@dataclass
class Scores:
    recall: dict[str, tuple[int, int]]
    false: dict[str, tuple[int, int]]

    def totals(self) -> tuple[float, float, int, int]:
        hit, pos = (sum(v[0] for v in self.recall.values()), sum(v[1] for v in self.recall.values()))
        wrong, neg = (sum(v[0] for v in self.false.values()), sum(v[1] for v in self.false.values()))
        return hit / max(pos, 1), wrong / max(neg, 1), pos, neg


@functools.cache
def _tokens(text: str) -> tuple[str, ...]:
    return tokens(text)


def score(pairs: Sequence[Pair], cosines: dict[tuple[str, str], float], limits: Thresholds,
          keep: Callable[[Pair], bool]) -> Scores:
    recall: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    false: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for p in pairs:
        if not keep(p):
            continue
        merged = compare(_tokens(p.stored), _tokens(p.incoming), cosines[(p.stored, p.incoming)], limits).duplicate
        bucket = recall if p.duplicate else false
        bucket[p.rule][0] += int(merged)
        bucket[p.rule][1] += 1
    return Scores({k: (v[0], v[1]) for k, v in recall.items()}, {k: (v[0], v[1]) for k, v in false.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("locomo", type=Path)
    parser.add_argument("scifact", type=Path)
    parser.add_argument("--sources", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cache", type=Path, default=Path(".pgcontext/bench-cache"))
    args = parser.parse_args()
    pairs, n = build(args.locomo, args.scifact, args.sources, args.seed, args.cache)
    texts = sorted({t for p in pairs for t in (p.stored, p.incoming)})
    index = {t: i for i, t in enumerate(texts)}
    emb = embeddings(texts, args.cache)
    cosines = {(p.stored, p.incoming): float(emb[index[p.stored]] @ emb[index[p.incoming]]) for p in pairs}
    tune_ids = set(random.Random(args.seed + 1).sample(range(n), n // 2))

    def tuning(p: Pair) -> bool:
        return p.source in tune_ids

    def held_out(p: Pair) -> bool:
        return p.source not in tune_ids

    best: tuple[float, float, Thresholds] | None = None
    for cosine in [round(0.5 + 0.025 * i, 3) for i in range(19)]:
        for synonyms in range(4):
            limits = Thresholds(cosine=cosine, max_synonyms=synonyms)
            recall, false, _, _ = score(pairs, cosines, limits, tuning).totals()
            if false <= 0.005 and (best is None or (recall, cosine) > (best[0], best[2].cosine)):
                best = (recall, false, limits)
    defaults = FactSettings()
    default_limits = Thresholds(cosine=defaults.dedup_cosine, max_synonyms=defaults.dedup_max_synonyms)
    print(f"pairs: {len(pairs)} from {n} sentences (half LoCoMo turns, half SciFact sentences); "
          f"tuning half {len(tune_ids)} sources, held-out half {n - len(tune_ids)}")
    if best is not None:
        print(f"tuned on the first half: dedup_cosine={best[2].cosine} dedup_max_synonyms={best[2].max_synonyms} "
              f"(recall {best[0]:.3f}, false merges {best[1]:.2%})")
    for label, limits in (("defaults", default_limits), *((("tuned", best[2]),) if best else ())):
        scores = score(pairs, cosines, limits, held_out)
        recall, false, pos, neg = scores.totals()
        print(f"held-out, {label} (cosine {limits.cosine}, synonyms {limits.max_synonyms}): "
              f"recall {recall:.3f} of {pos} positives, false merges {false:.2%} of {neg} negatives")
        print("  recall by rewrite: " + ", ".join(f"{k} {h}/{t}" for k, (h, t) in sorted(scores.recall.items())))
        print("  merged by change:  " + ", ".join(f"{k} {h}/{t}" for k, (h, t) in sorted(scores.false.items())))


if __name__ == "__main__":
    main()
