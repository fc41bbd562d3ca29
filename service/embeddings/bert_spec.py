"""What the all-MiniLM-L6-v2 graph is, for the code that runs it: its shape, its input and output names
and how token ids are fed to it. Apart from :mod:`service.embeddings.bert_graph`, which writes the graph
and needs ``onnx`` (over a second to import, mostly its ``ml_dtypes``): only a first start builds the
model, and every process that merely runs it, or does not embed at all (the command line), starts
without it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

OPSET = 17
"""17 is the first opset with ``LayerNormalization``; older runtimes can still load it."""
MS_DOMAIN = "com.microsoft"
"""onnxruntime's contrib operators (``Attention``), opset version 1."""
IR_VERSION = 8
"""Pinned so the serialised bytes do not change with the installed ``onnx`` version."""

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "sentence_embedding"


@dataclass(frozen=True, slots=True)
class BertConfig:
    layers: int = 6
    hidden: int = 384
    heads: int = 12
    intermediate: int = 1536
    layer_norm_eps: float = 1e-12
    vocab: int = 30522
    max_positions: int = 512

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


MINILM_L6 = BertConfig()

FloatArray = npt.NDArray[np.float32]


def input_feed(ids: Sequence[Sequence[int]]) -> dict[str, npt.NDArray[np.int64]]:
    """Right-pad token id lists into the three graph inputs (single-segment, so token types are 0)."""
    width = max((len(row) for row in ids), default=0)
    input_ids = np.zeros((len(ids), width), dtype=np.int64)
    attention_mask = np.zeros((len(ids), width), dtype=np.int64)
    for i, row in enumerate(ids):
        input_ids[i, : len(row)] = row
        attention_mask[i, : len(row)] = 1
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": np.zeros_like(input_ids),
    }
