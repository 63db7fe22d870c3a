"""What a GGUF header must satisfy before llama.cpp reads it, where llama.cpp would abort the process
(GGML_ASSERT in llama_model::load_hparams, src/llama-model.cpp) rather than fail the load; and what
the header says a token of context costs in KV cache, for fitting a context to the machine."""

from __future__ import annotations

from typing import Any

MAX_LAYERS = 512  # LLAMA_MAX_LAYERS, src/llama-hparams.h
MAX_EXPERTS = 1024  # LLAMA_MAX_EXPERTS
# Architectures whose loader reads one expert as none (llama.cpp's own exception).
ONE_EXPERT_IS_NONE = ("hunyuan-dense", "hunyuan_vl")
KV_BYTES = 2  # an F16 cache, llama.cpp's default type for K and V


def _largest(value: Any) -> int:
    """A key llama.cpp reads as one number or one per layer: the largest (0 where absent)."""
    if isinstance(value, list):
        return max((v for v in value if isinstance(v, int)), default=0)
    return value if isinstance(value, int) else 0


def hparams_problem(fields: dict[str, Any], arch: str) -> str | None:
    """Why llama.cpp would abort on this header (None: it would not), as the header's own words."""
    key = lambda name: f"{arch}.{name}"  # noqa: E731
    layers = fields.get(key("block_count"))
    if isinstance(layers, int) and not 0 < layers <= MAX_LAYERS:
        return f"{key('block_count')} = {layers}, where llama.cpp takes 1 to {MAX_LAYERS}"
    nextn = _largest(fields.get(key("nextn_predict_layers")))
    if isinstance(layers, int) and nextn > layers:
        return f"{key('nextn_predict_layers')} = {nextn}, more than its {layers} layers"
    experts = _largest(fields.get(key("expert_count")))
    used = _largest(fields.get(key("expert_used_count")))
    groups = _largest(fields.get(key("expert_group_count")))
    group_used = _largest(fields.get(key("expert_group_used_count")))
    if arch in ONE_EXPERT_IS_NONE and experts <= 1:
        experts = used = 0
    said = f"{key('expert_count')} = {experts}, {key('expert_used_count')} = {used}"
    if experts > MAX_EXPERTS:
        return f"{key('expert_count')} = {experts}, past llama.cpp's {MAX_EXPERTS}"
    if used > experts or (experts > 0 and used == 0):
        return f"{said}: a model uses between 1 and all of its experts, or has none"
    if experts == 0 and groups:
        return f"{key('expert_group_count')} = {groups} without experts"
    if experts > 0 and groups >= experts:
        return f"{key('expert_group_count')} = {groups}, not fewer than its {experts} experts"
    if groups > 1 and (experts % groups or not 0 < group_used < groups):
        return (
            f"{key('expert_group_count')} = {groups}, {key('expert_group_used_count')} = {group_used} "
            f"with {experts} experts"
        )
    return None


def kv_bytes_per_token(fields: dict[str, Any], arch: str) -> int | None:
    """The KV cache one token of context takes, all layers (None where the header does not say)."""
    layers = fields.get(f"{arch}.block_count")
    embd = fields.get(f"{arch}.embedding_length")
    heads = _largest(fields.get(f"{arch}.attention.head_count"))
    if not (isinstance(layers, int) and isinstance(embd, int) and heads):
        return None
    kv_heads = _largest(fields.get(f"{arch}.attention.head_count_kv")) or heads
    k = _largest(fields.get(f"{arch}.attention.key_length")) or embd // heads
    v = _largest(fields.get(f"{arch}.attention.value_length")) or embd // heads
    return layers * kv_heads * (k + v) * KV_BYTES
