"""The all-MiniLM-L6-v2 sentence encoder written as an ONNX graph straight from its safetensors weights.

Writing the graph by hand (instead of exporting through torch) keeps torch out of the service. The graph
is BERT + mean pooling over the attention mask + L2 normalisation, i.e. exactly what
sentence-transformers computes, so callers get finished sentence embeddings from one ``run``.

Self-attention is one onnxruntime contrib ``Attention`` node per layer (packed Q/K/V projection, the
scaled dot product, the key padding mask and the head merge in one kernel), which ``quantize_dynamic``
turns into ``QAttention``. The graph therefore needs onnxruntime (``com.microsoft`` domain) to run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

from service.embeddings.bert_spec import (
    INPUT_NAMES,
    IR_VERSION,
    MINILM_L6,
    MS_DOMAIN,
    OPSET,
    OUTPUT_NAME,
    BertConfig,
    FloatArray,
)

__all__ = ["build_model"]


class _Graph:
    """Collects nodes and initializers; every intermediate gets a fresh, deterministic name."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self._count = 0
        self.value_info: list[onnx.ValueInfoProto] = []

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
        "count_eps": g.const("count_eps", 1e-9),
        "norm_eps": g.const("norm_eps", 1e-12),
    }
    hidden = _embeddings(g, weights, config)
    # Attention takes the raw (batch, sequence) 0/1 mask as int32 "mask_index" and adds mask_filter_value
    # (-10000) to the scores of padding keys: exp() of that underflows to exactly 0, as HF BERT's finfo.min.
    mask_index = g.op("Cast", "attention_mask", to=TensorProto.INT32)
    for layer in range(config.layers):
        hidden = _encoder_layer(g, weights, config, f"encoder.layer.{layer}", hidden, mask_index, scalars)
    _mean_pool_and_normalise(g, hidden, g.op("Cast", "attention_mask", to=TensorProto.FLOAT), scalars)

    graph = helper.make_graph(
        g.nodes,
        "all-MiniLM-L6-v2",
        [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"]) for name in INPUT_NAMES],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", config.hidden])],
        g.initializers,
        # onnx shape inference cannot see through contrib ops; quantize_dynamic needs the Attention outputs typed.
        value_info=g.value_info,
    )
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(MS_DOMAIN, 1)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="pgcontext")
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
    mask_index: str,
    scalars: Mapping[str, str],
) -> str:
    attn = f"{prefix}.attention.self"
    # Packed projection: weight (hidden, 3 * hidden) = [Wq | Wk | Wv] (torch stores (out, in), hence .T),
    # each third head-major, as Attention (and quantize_dynamic's per-column QAttention weights) expect.
    parts = ("query", "key", "value")
    qkv_weight = np.concatenate([w[f"{attn}.{part}.weight"].T for part in parts], axis=1)
    qkv_bias = np.concatenate([w[f"{attn}.{part}.bias"] for part in parts])
    context = g.op(
        "Attention",
        hidden,
        g.const(f"{attn}.qkv_weight", qkv_weight),
        g.const(f"{attn}.qkv_bias", qkv_bias),
        mask_index,
        domain=MS_DOMAIN,
        num_heads=config.heads,
        # The kernel's own default; spelled out because the weights above are deliberately left unscaled.
        scale=1.0 / math.sqrt(config.head_dim),
    )
    g.value_info.append(helper.make_tensor_value_info(context, TensorProto.FLOAT, ["batch", "sequence", config.hidden]))
    attended = _linear(g, w, f"{prefix}.attention.output.dense", context)
    hidden = _layer_norm(g, w, f"{prefix}.attention.output.LayerNorm", _residual(g, attended, hidden), config)

    inner = _gelu(g, _linear(g, w, f"{prefix}.intermediate.dense", hidden), scalars)
    out = _linear(g, w, f"{prefix}.output.dense", inner)
    return _layer_norm(g, w, f"{prefix}.output.LayerNorm", _residual(g, out, hidden), config)


def _residual(g: _Graph, x: str, skip: str) -> str:
    # Sum, not Add: onnxruntime fuses Add + LayerNormalization into its contrib SkipLayerNormalization,
    # whose CPU kernel is a scalar loop: ~55 us against ~11 us for Sum + LayerNormalization on a
    # 22-token query (12 per run, about a fifth of a query's CPU). Same arithmetic either way.
    return g.op("Sum", x, skip)


def _linear(g: _Graph, w: Mapping[str, FloatArray], prefix: str, x: str) -> str:
    # torch stores (out, in); MatMul wants (in, out). A constant-B MatMul is what quantize_dynamic targets.
    weight = g.const(f"{prefix}.weight_t", w[f"{prefix}.weight"].T)
    return g.op("Add", g.op("MatMul", x, weight), g.const(f"{prefix}.bias", w[f"{prefix}.bias"]))


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
