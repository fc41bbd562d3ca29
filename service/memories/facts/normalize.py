"""Text normalization for duplicate detection: one canonical token sequence per way of writing a fact.

``tokens`` folds what does not change a sentence's meaning -- case, Unicode forms, punctuation,
whitespace, contractions ("didn't" -> "did not", "I'm" -> "i am"), a possessive's "'s", thousands
separators -- and keeps every word. ``text_hash`` hashes that sequence: the exact-duplicate key.
``content`` then drops articles and filler words ("basically", "um", "you know"), the comparison
the near-duplicate check makes.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Final

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})
_IRREGULAR: Final = {"won't": "will not", "can't": "can not", "cannot": "can not", "shan't": "shall not",
                     "ain't": "is not", "let's": "let us", "y'all": "you all"}
_PRONOUN_IS: Final = frozenset({"it", "that", "he", "she", "there", "what", "here", "who", "where", "when", "how",
                                "this", "everyone", "everything", "nothing", "someone", "something", "why"})
_SUFFIXES: Final = (("n't", " not"), ("'re", " are"), ("'ve", " have"), ("'ll", " will"), ("'d", " would"),
                    ("'m", " am"))
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?(?:[.,][0-9]+)*")
_THOUSANDS = re.compile(r"^\d{1,3}(?:,\d{3})+(?:\.\d+)?$")

ARTICLES: Final = frozenset({"a", "an", "the"})
FILLER: Final = frozenset({
    "um", "uh", "erm", "hmm", "uhm", "basically", "actually", "really", "literally", "honestly", "totally",
    "definitely", "just", "very", "quite", "simply", "anyway", "anyways", "oh", "indeed", "certainly", "truly",
    "absolutely", "seriously", "obviously", "clearly", "surely", "okay", "ok",
})
FILLER_PHRASES: Final = (("you", "know"), ("i", "mean"), ("kind", "of"), ("sort", "of"), ("to", "be", "honest"))
OPENERS: Final = frozenset({"well", "so", "oh", "like", "anyway", "alright", "right", "hey", "wow"})
"""Discourse markers dropped only at the very start of a text ("Well, basically, ...")."""


def _expand(word: str) -> list[str]:
    if word in _IRREGULAR:
        return _IRREGULAR[word].split()
    for suffix, replacement in _SUFFIXES:
        if word.endswith(suffix) and len(word) > len(suffix):
            stem = word[: -len(suffix)]
            if suffix == "n't" and stem in ("ca", "wo", "sha"):
                stem = {"ca": "can", "wo": "will", "sha": "shall"}[stem]
            return [stem, *replacement.split()]
    if word.endswith("'s") and len(word) > 2:
        stem = word[:-2]
        return [stem, "is"] if stem in _PRONOUN_IS else [stem]  # "it's" is "it is"; "Alice's" a possessive
    if word.endswith("s'") or "'" in word:
        return [word.replace("'", "")]
    return [word]


def tokens(text: str) -> tuple[str, ...]:
    """Every word of ``text``, case-folded, contractions expanded, punctuation and spacing dropped."""
    folded = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES).casefold().replace("&", " and ")
    out: list[str] = []
    for match in _WORD.finditer(folded):
        word = match.group().rstrip(".,")
        if _THOUSANDS.match(word):
            word = word.replace(",", "")
        elif "," in word:
            out.extend(part for part in word.split(",") if part)
            continue
        out.extend(_expand(word))
    return tuple(out)


def text_hash(text: str) -> bytes:
    """The exact-duplicate key: texts with the same words in the same order share it."""
    return hash_words(tokens(text))


def hash_words(words: tuple[str, ...]) -> bytes:
    """:func:`text_hash` of already tokenized text."""
    return hashlib.sha256(" ".join(words).encode()).digest()


def content(words: tuple[str, ...]) -> list[str]:
    """``words`` without articles and filler: what the near-duplicate check compares."""
    out: list[str] = []
    i = 0
    while i < len(words):
        for phrase in FILLER_PHRASES:
            if words[i: i + len(phrase)] == phrase:
                i += len(phrase)
                break
        else:
            if words[i] not in ARTICLES and words[i] not in FILLER and not (not out and words[i] in OPENERS):
                out.append(words[i])
            i += 1
    return out
