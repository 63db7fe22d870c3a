from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# The suite never reads the user's own defaults: a config file of theirs (a default model, say)
# would change what the commands under test do.
os.environ["LOCALSPEC_CONFIG"] = str(Path(__file__).parent / "no-such-config.toml")
for _var in [
    v
    for v in os.environ
    if v.startswith("LOCALSPEC_") and v not in ("LOCALSPEC_CONFIG", "LOCALSPEC_REGISTRY")
]:
    del os.environ[_var]
# Nor does it read or write the user's cache (suffix drafting keeps earlier outputs there).
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="localspec-tests-cache-")
# Nor its data directory (datastores of their files).
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="localspec-tests-data-")

from tiny_models import TinySpec, write_tiny_llama  # noqa: E402

from localspec.backend.hardware import physical_cores  # noqa: E402
from localspec.backend.model import Model, ModelOptions  # noqa: E402
from localspec.bench.ties import Divergence, compare_greedy  # noqa: E402


@dataclass(frozen=True)
class TinyModels:
    target: Path
    close: Path  # perturbed copy of the target: high acceptance
    poor: Path  # heavily perturbed copy: low acceptance, many rejections
    other_vocab: Path  # same weights, one token's text changed
    # The vocabulary padded with 16 ids of its own (as Qwen2.5 7B is against 0.5B): a target with
    # ids the draft lacks, and a draft with ids the target lacks.
    padded_target: Path
    padded_close: Path


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    d = tmp_path_factory.mktemp("tiny")
    return TinyModels(
        target=write_tiny_llama(d / "target.gguf", TinySpec(seed=1)),
        close=write_tiny_llama(d / "close.gguf", TinySpec(seed=2, perturb_from=1, perturb=0.03)),
        poor=write_tiny_llama(d / "poor.gguf", TinySpec(seed=3, perturb_from=1, perturb=0.25)),
        other_vocab=write_tiny_llama(d / "other.gguf", TinySpec(seed=1, renamed=((300, "zz"),))),
        padded_target=write_tiny_llama(d / "padded_target.gguf", TinySpec(seed=1, pad=16)),
        padded_close=write_tiny_llama(
            d / "padded_close.gguf", TinySpec(seed=2, perturb_from=1, perturb=0.03, pad=16)
        ),
    )


def model_options(n_ctx: int = 1024) -> ModelOptions:
    cores = physical_cores()
    return ModelOptions(n_ctx=n_ctx, n_threads=cores, n_threads_batch=cores)


@pytest.fixture(scope="session")
def smollm2_q4() -> Path:
    from localspec.config.defaults import embedded_model

    return embedded_model()


@pytest.fixture(scope="session")
def smollm2_f16(tmp_path_factory: pytest.TempPathFactory, smollm2_q4: Path) -> Path:
    import llama_cpp

    dst = tmp_path_factory.mktemp("smol") / "smollm2-f16.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_F16
    params.allow_requantize = True
    rc = llama_cpp.llama_model_quantize(str(smollm2_q4).encode(), str(dst).encode(), ctypes.byref(params))
    assert rc == 0, "llama_model_quantize failed"
    return dst


def assert_greedy_equivalent(
    target: Model, prompt: Sequence[int], expected: Sequence[int], got: Sequence[int]
) -> Divergence | None:
    """Greedy speculative output must equal target-only output, or first differ at a tie."""
    div = compare_greedy(target, prompt, expected, got)
    assert div is None or div.is_tie, (
        f"outputs differ at token {div.index} ({div.expected} vs {div.got}), logit margin {div.margin:.4f}"
    )
    return div
