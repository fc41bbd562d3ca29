"""Build ``synonyms.tsv.gz`` (the near-duplicate check's synonym groups) from a WordNet 3.0 database.

    python -m service.memories.facts.build_lexicon /usr/share/wordnet    # Debian: apt-get install wordnet-base

A group is a synset that is one of the first ``TOP_SENSES`` *tagged* senses (WordNet orders a
lemma's senses by corpus frequency; ``tagsense_cnt`` says how many were seen in tagged text) of at
least two single-word lemmas: "big"/"large", "buy"/"purchase", "film"/"movie". Rare senses are left
out, so "tea" and "coffee" never meet through an obscure synset. Also written: WordNet's irregular
forms (``noun.exc``, ``verb.exc``, ``adj.exc``: "bought" -> "buy"), for the lemmatizer.

Output lines: ``g<TAB>pos<TAB>lemma lemma ...`` and ``x<TAB>pos<TAB>form<TAB>base``. WordNet 3.0 is
(c) Princeton University, used under its license (reproduced in ``synonyms.LICENSE``).
"""

from __future__ import annotations

import gzip
import sys
from collections import defaultdict
from pathlib import Path

from service.files import write_atomically

TOP_SENSES = 3
POS = {"noun": "n", "verb": "v", "adj": "a", "adv": "r"}
OUT = Path(__file__).with_name("synonyms.tsv.gz")


def build(wordnet: Path) -> list[str]:
    lines: list[str] = []
    for name, pos in POS.items():
        members: dict[str, set[str]] = defaultdict(set)
        for raw in (wordnet / f"index.{name}").read_text(encoding="latin-1").splitlines():
            if raw.startswith(" "):
                continue  # the license header
            parts = raw.split()
            lemma, synset_cnt, p_cnt = parts[0], int(parts[2]), int(parts[3])
            if "_" in lemma or "-" in lemma or not lemma.isalpha():
                continue
            tagged = int(parts[5 + p_cnt])
            offsets = parts[6 + p_cnt: 6 + p_cnt + synset_cnt]
            for offset in offsets[:min(TOP_SENSES, tagged)]:
                members[offset].add(lemma)
        for offset in sorted(members):
            if len(members[offset]) >= 2:
                lines.append(f"g\t{pos}\t{' '.join(sorted(members[offset]))}")
        exc = wordnet / f"{name}.exc"
        if exc.exists():
            for raw in exc.read_text(encoding="latin-1").splitlines():
                form, *bases = raw.split()
                if bases and form.isalpha() and bases[0].isalpha():
                    lines.append(f"x\t{pos}\t{form}\t{bases[0]}")
    return lines


def main() -> None:
    wordnet = Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/share/wordnet")
    lines = build(wordnet)
    data = ("\n".join(lines) + "\n").encode()
    write_atomically(OUT, gzip.compress(data, compresslevel=9, mtime=0))  # byte-identical rebuilds
    license_text = (wordnet / "data.noun").read_text(encoding="latin-1").split("\n")[:29]
    notice = [line.strip().partition(" ")[2].rstrip() for line in license_text if line.startswith("  ")]
    write_atomically(OUT.with_name("synonyms.LICENSE"), "\n".join(notice) + "\n")
    print(f"{OUT}: {len(lines)} lines, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
