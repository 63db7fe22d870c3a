"""Which targets can draft with their own MTP heads (NextN layers), read from the GGUF's header and
tensor list before any weights load: how many heads the file holds, and whether this llama.cpp runs
them for its architecture."""

from __future__ import annotations

from localspec.backend.gguf_file import GGUFInfo
from localspec.errors import LocalspecError

# Architectures whose NextN layers this llama.cpp runs as an MTP graph (src/models/*.cpp building
# LLM_GRAPH_TYPE_DECODER_MTP); others (glm4) keep theirs unused. (Gemma 4's MTP drafter is a file of
# its own: backend/assistant.py.)
# (glm5-next loads NextN layers but its MTP graph throws "not implemented yet".)
MTP_ARCHS = frozenset(
    {
        "bailingmoe3",
        "cohere2moe",
        "deepseek2",
        "deepseek32",
        "deepseek4",
        "glm-dsa",
        "glm4moe",
        "hy_v3",
        "mimo2",
        "nemotron_h_moe",
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "step35",
    }
)
# Those whose MTP graph picks a head by llama_set_nextn_layer_offset; every other one asserts that
# the file holds a single head, and aborts the process on more.
CHAINED_ARCHS = frozenset({"hy_v3", "mimo2", "step35"})


def head_count(info: GGUFInfo) -> int:
    """How many NextN heads the file holds (0: none, or only the header's claim of them: a trunk
    shipped without its heads)."""
    arch = info.fields.get("general.architecture")
    claimed = info.fields.get(f"{arch}.nextn_predict_layers", 0)
    blocks = info.fields.get(f"{arch}.block_count", 0)
    if not isinstance(claimed, int) or not isinstance(blocks, int) or claimed <= 0:
        return 0
    names = {t.name for t in info.tensors}
    held = sum(f"blk.{i}.nextn.eh_proj.weight" in names for i in range(max(blocks - claimed, 0), blocks))
    if claimed >= blocks or 0 < held < claimed:
        raise LocalspecError(
            f"model file is inconsistent: {info.path} (its header gives {claimed} MTP heads of "
            f"{blocks} layers, its tensors hold {held})"
        )
    return held


def _runs_heads(arch: object, heads: int) -> bool:
    return arch in MTP_ARCHS and (heads == 1 or arch in CHAINED_ARCHS)


def drafts_itself(info: GGUFInfo) -> bool:
    """Whether the target can draft with its own heads (what it does when no draft is given)."""
    heads = head_count(info)
    return heads > 0 and _runs_heads(info.fields.get("general.architecture"), heads)


def check_heads(info: GGUFInfo) -> None:
    """Raise LocalspecError unless the target can draft with its own heads here."""
    arch = info.fields.get("general.architecture")
    if not head_count(info):
        raise LocalspecError(
            f"-d mtp needs a model with MTP heads (NextN layers): {info.path.name} ({arch}) has none"
        )
    if arch not in MTP_ARCHS:
        raise LocalspecError(
            f"-d mtp: this llama.cpp runs no MTP graph for {arch} ({info.path.name}); "
            f"it does for {', '.join(sorted(MTP_ARCHS))}"
        )
    if not _runs_heads(arch, heads := head_count(info)):
        raise LocalspecError(
            f"-d mtp: this llama.cpp runs one MTP head for {arch}, and {info.path.name} holds {heads} "
            f"(several are run for {', '.join(sorted(CHAINED_ARCHS))})"
        )
