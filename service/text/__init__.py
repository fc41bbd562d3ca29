"""Text as models see it: tiktoken encodings (offline) and model families (encoding, safety factor)."""
