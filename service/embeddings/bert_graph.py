"""The all-MiniLM-L6-v2 sentence encoder written as an ONNX graph straight from its safetensors weights.

Writing the graph by hand (instead of exporting through torch) keeps torch out of the service. The graph
is BERT + mean pooling over the attention mask + L2 normalisation, i.e. exactly what
sentence-transformers computes, so callers get finished sentence embeddings from one ``run``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
"""17 is the first opset with ``LayerNormalization``; older runtimes can still load it."""
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


class _Graph:
    """Collects nodes and initializers; every intermediate gets a fresh, deterministic name."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self._count = 0

    def const(self, name: str, value: npt.ArrayLike, dtype: npt.DTypeLike = np.float32) -> str:
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        self._count += 1
        return self.named_op(f"{op_type}_{self._count}", op_type, *inputs, **attrs)

    def named_op(self, out: str, op_type: str, *inputs: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=out, **attrs))
        return out


def build_model(weights: Mapping[str, FloatArray], config: BertConfig = MINILM_L6) -> onnx.ModelProto:
    """Return the fp32 sentence-embedding graph for ``weights`` (HF ``BertModel`` key names)."""
    g = _Graph()
    scalars = {
        "one": g.const("one", 1.0),
        "half": g.const("half", 0.5),
        "sqrt2": g.const("sqrt2", math.sqrt(2.0)),
        "mask_min": g.const("mask_min", np.finfo(np.float32).min),
        "count_eps": g.const("count_eps", 1e-9),
        "norm_eps": g.const("norm_eps", 1e-12),
    }
    hidden = _embeddings(g, weights, config)
    mask = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    # Padding keys get the most negative float so softmax gives them exactly zero weight, as in HF BERT.
    mask_bias = g.op(
        "Unsqueeze",
        g.op("Mul", g.op("Sub", scalars["one"], mask), scalars["mask_min"]),
        g.const("axes_1_2", [1, 2], np.int64),
    )
    for layer in range(config.layers):
        hidden = _encoder_layer(g, weights, config, f"encoder.layer.{layer}", hidden, mask_bias, scalars)
    _mean_pool_and_normalise(g, hidden, mask, scalars)

    graph = helper.make_graph(
        g.nodes,
        "all-MiniLM-L6-v2",
        [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"]) for name in INPUT_NAMES],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", config.hidden])],
        g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="pgcontext")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def _embeddings(g: _Graph, w: Mapping[str, FloatArray], config: BertConfig) -> str:
    words = g.op("Gather", g.const("word_embeddings", w["embeddings.word_embeddings.weight"]), "input_ids")
    types = g.op(
        "Gather",
        g.const("token_type_embeddings", w["embeddings.token_type_embeddings.weight"]),
        "token_type_ids",
    )
    # Positions are always 0..seq_len-1, so slicing the table replaces building a position_ids tensor.
    seq_len = g.op("Shape", "input_ids", start=1, end=2)
    positions = g.op(
        "Slice",
        g.const("position_embeddings", w["embeddings.position_embeddings.weight"]),
        g.const("zero_1d", [0], np.int64),
        seq_len,
        g.const("axis_0", [0], np.int64),
    )
    summed = g.op("Add", g.op("Add", words, types), positions)
    return _layer_norm(g, w, "embeddings.LayerNorm", summed, config)


def _encoder_layer(
    g: _Graph,
    w: Mapping[str, FloatArray],
    config: BertConfig,
    prefix: str,
    hidden: str,
    mask_bias: str,
    scalars: Mapping[str, str],
) -> str:
    heads_shape = g.const(f"{prefix}.heads_shape", [0, 0, config.heads, config.head_dim], np.int64)
    hidden_shape = g.const(f"{prefix}.hidden_shape", [0, 0, config.hidden], np.int64)
    attn = f"{prefix}.attention.self"
    # Folding 1/sqrt(head_dim) into the query projection saves a Mul over the (heads, seq, seq) scores.
    scale = 1.0 / math.sqrt(config.head_dim)
    query = _linear(g, w, f"{attn}.query", hidden, scale=scale)
    key = _linear(g, w, f"{attn}.key", hidden)
    value = _linear(g, w, f"{attn}.value", hidden)
    q = g.op("Transpose", g.op("Reshape", query, heads_shape), perm=[0, 2, 1, 3])
    k = g.op("Transpose", g.op("Reshape", key, heads_shape), perm=[0, 2, 3, 1])
    v = g.op("Transpose", g.op("Reshape", value, heads_shape), perm=[0, 2, 1, 3])
    probs = g.op("Softmax", g.op("Add", g.op("MatMul", q, k), mask_bias), axis=-1)
    context = g.op("Reshape", g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3]), hidden_shape)
    attended = _linear(g, w, f"{prefix}.attention.output.dense", context)
    hidden = _layer_norm(g, w, f"{prefix}.attention.output.LayerNorm", g.op("Add", attended, hidden), config)

    inner = _gelu(g, _linear(g, w, f"{prefix}.intermediate.dense", hidden), scalars)
    out = _linear(g, w, f"{prefix}.output.dense", inner)
    return _layer_norm(g, w, f"{prefix}.output.LayerNorm", g.op("Add", out, hidden), config)


def _linear(g: _Graph, w: Mapping[str, FloatArray], prefix: str, x: str, scale: float = 1.0) -> str:
    # torch stores (out, in); MatMul wants (in, out). A constant-B MatMul is what quantize_dynamic targets.
    weight = w[f"{prefix}.weight"].T * np.float32(scale)
    bias = w[f"{prefix}.bias"] * np.float32(scale)
    return g.op("Add", g.op("MatMul", x, g.const(f"{prefix}.weight_t", weight)), g.const(f"{prefix}.bias", bias))


def _layer_norm(g: _Graph, w: Mapping[str, FloatArray], prefix: str, x: str, config: BertConfig) -> str:
    return g.op(
        "LayerNormalization",
        x,
        g.const(f"{prefix}.weight", w[f"{prefix}.weight"]),
        g.const(f"{prefix}.bias", w[f"{prefix}.bias"]),
        axis=-1,
        epsilon=config.layer_norm_eps,
    )


def _gelu(g: _Graph, x: str, scalars: Mapping[str, str]) -> str:
    # Exact (erf) GELU as BERT uses, in the Div/Erf/Add/Mul/Mul shape onnxruntime fuses into one Gelu op.
    erf = g.op("Erf", g.op("Div", x, scalars["sqrt2"]))
    return g.op("Mul", g.op("Mul", x, g.op("Add", erf, scalars["one"])), scalars["half"])


def _mean_pool_and_normalise(g: _Graph, hidden: str, mask: str, scalars: Mapping[str, str]) -> str:
    axis_1 = g.const("axis_1", [1], np.int64)
    mask_3d = g.op("Unsqueeze", mask, g.const("axis_2", [2], np.int64))
    summed = g.op("ReduceSum", g.op("Mul", hidden, mask_3d), axis_1, keepdims=0)
    count = g.op("Max", g.op("ReduceSum", mask_3d, axis_1, keepdims=0), scalars["count_eps"])
    pooled = g.op("Div", summed, count)
    norm = g.op("Max", g.op("ReduceL2", pooled, axes=[1], keepdims=1), scalars["norm_eps"])
    return g.named_op(OUTPUT_NAME, "Div", pooled, norm)


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
