"""What a draft file (-d FILE) holds, read from its GGUF header before any weights load: a draft
model of its own, or a drafter trained for one target that reads that target's state (an EAGLE-3
head, a DFlash or DSpark block drafter, a Gemma 4 assistant); and whether it was made for the
target at hand. llama.cpp asserts (and kills the process) where such a drafter meets a target of
another shape, so a mismatch is told here in one line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localspec.backend.gguf_file import GGUFInfo, check_gguf
from localspec.backend.mtp_archs import drafts_itself
from localspec.errors import LocalspecError

DRAFT_MODEL, EAGLE3, DFLASH, DSPARK, ASSISTANT = (
    "draft-model",
    "eagle3",
    "dflash",
    "dspark",
    "gemma4-assistant",
)
KIND_NAMES = {
    DRAFT_MODEL: "a draft model",
    EAGLE3: "an EAGLE-3 head",
    DFLASH: "a DFlash block drafter",
    DSPARK: "a DSpark block drafter",
    ASSISTANT: "a Gemma 4 assistant (an MTP drafter in its own file)",
}
# Architectures whose llama.cpp graph hands out its layers' inputs (the features an EAGLE-3 or
# DFlash drafter reads: src/models/*.cpp setting t_layer_inp); asking another one for them aborts.
FEATURE_ARCHS = frozenset(
    {
        "bailingmoe3",
        "deepseek4",
        "gemma4",
        "gpt-oss",
        "hunyuan_vl",
        "lfm2",
        "llama",
        "mimo2",
        "minimax-01",
        "minimax-m2",
        "muse-glimmer",
        "nanbeige",
        "nemotron_h",
        "qwen3",
        "qwen35",
        "qwen35moe",
        "qwen3moe",
        "qwen3next",
        "qwen4exp",
    }
)


@dataclass(frozen=True)
class DrafterFile:
    kind: str  # one of KIND_NAMES
    target_layers: tuple[int, ...] = ()  # the target's layers whose inputs it reads
    target_hidden: int | None = None  # the hidden size of the target it was made for
    # What in the file localspec does not run (DFlash2's selector, say): refused, or for an alias's
    # drafter, left to prompt lookup
    variant: str = ""

    @property
    def runs(self) -> bool:
        return not self.variant

    @property
    def name(self) -> str:
        """The kind in words, with the variant it is."""
        return KIND_NAMES[self.kind] + (f" ({self.variant})" if self.variant else "")


def _token_count(info: GGUFInfo) -> int:
    tokens = info.tokens()
    return len(tokens) if tokens is not None else 0


def drafter_file(info: GGUFInfo) -> DrafterFile:
    """What the draft file `info` holds."""
    arch = info.arch
    if arch not in (EAGLE3, DFLASH, ASSISTANT):
        return DrafterFile(DRAFT_MODEL)
    if arch == ASSISTANT:
        return DrafterFile(ASSISTANT, target_hidden=info.arch_int("embedding_length_out"))
    layers = info.fields.get(f"{arch}.target_layers")
    if not isinstance(layers, list) or not layers or not all(isinstance(i, int) for i in layers):
        raise LocalspecError(f"draft file is inconsistent: {info.path} ({arch} without {arch}.target_layers)")
    if arch == EAGLE3:
        if len(layers) != 3:
            raise LocalspecError(
                f"draft file is inconsistent: {info.path} (an EAGLE-3 head reads 3 target layers, "
                f"its header gives {len(layers)})"
            )
        return DrafterFile(EAGLE3, tuple(layers), info.arch_int("target_hidden_size"))
    names = {t.name for t in info.tensors}
    kind = DSPARK if "markov_w1.weight" in names else DFLASH
    return DrafterFile(kind, tuple(layers), info.arch_int("embedding_length"), _dflash_variant(info, names))


def _dflash_variant(info: GGUFInfo, names: set[str]) -> str:
    """Of a DFlash or DSpark file, what this localspec does not run: DFlash2's selector, the
    DeepSeek-V4 stages (hyper-connections), a file without the mask token its blocks are made of,
    a Markov head without the block size it needs (llama.cpp asserts)."""
    if "selector_hidden.weight" in names:
        return "DFlash2 (a selector lattice)"
    if info.arch_int("hyper_connection.count"):
        return "DeepSeek-V4 stages"
    if not isinstance(info.fields.get("tokenizer.ggml.mask_token_id"), int):
        return "no mask token"
    if "markov_w1.weight" in names and info.arch_int("block_size") is None:
        return "no dflash.block_size, which its Markov head needs"
    return ""


def check_drafter(target: GGUFInfo, draft: GGUFInfo) -> DrafterFile:
    """What `draft` holds, refused in one line where it was made for another target, or holds what
    localspec does not run (its `variant`)."""
    held = drafter_file(draft)
    if held.kind == DRAFT_MODEL:
        return held
    what = f"{draft.path.name} is {KIND_NAMES[held.kind]}"
    arch, hidden, layers = (
        target.arch,
        target.arch_int("embedding_length"),
        target.arch_int("block_count") or 0,
    )
    if held.kind == ASSISTANT and arch != "gemma4":
        raise LocalspecError(f"{what}, made for a Gemma 4 target; {target.path.name} is {arch or 'unknown'}")
    if held.target_hidden is not None and held.target_hidden != hidden:
        raise LocalspecError(
            f"{what} for a target of hidden size {held.target_hidden}; {target.path.name} has {hidden}"
        )
    if any(not 0 <= i < layers for i in held.target_layers):
        raise LocalspecError(
            f"{what} reading layers {list(held.target_layers)}; {target.path.name} has {layers} layers"
        )
    if held.kind == ASSISTANT and (mismatch := _assistant_mismatch(target, draft)):
        raise LocalspecError(f"{what} for another Gemma 4: {mismatch}")
    if _token_count(draft) != _token_count(target):
        raise LocalspecError(
            f"{what} with a vocabulary of {_token_count(draft)} tokens; {target.path.name} has "
            f"{_token_count(target)}"
        )
    if held.target_layers and arch not in FEATURE_ARCHS:
        raise LocalspecError(
            f"{what}: this llama.cpp hands out no layer inputs for {arch} ({target.path.name})"
        )
    if not held.runs:
        raise LocalspecError(
            f"{draft.path.name} is {held.name}: localspec does not draft with these yet (it drafts "
            "with draft models, EAGLE-3 heads, DFlash and DSpark block drafters, Gemma 4 assistants "
            "and a target's own MTP heads); leave out -d to draft by prompt lookup"
        )
    return held


def _assistant_mismatch(target: GGUFInfo, draft: GGUFInfo) -> str:
    """Where a Gemma 4 assistant cannot read this target's cache (its attention reads the target's
    last sliding-window layer and last full layer, llama.cpp asserts on any other shape): what
    differs, or nothing."""
    for key in ("attention.head_count_kv", "attention.key_length", "attention.key_length_swa"):
        ours, theirs = draft.arch_int(key), target.arch_int(key)
        if ours is not None and theirs is not None and ours != theirs:  # per-layer lists: not told here
            return f"{key} {ours}, {target.path.name} has {theirs}"
    pattern = target.fields.get("gemma4.attention.sliding_window_pattern")
    if not isinstance(pattern, list) or len(pattern) < 2 or pattern[-2:] != [True, False]:
        return f"{target.path.name} does not end in a sliding-window layer and a full one"
    return ""


def drafter_of(target: Path | None, draft: Path | None) -> str | None:
    """What drafts for a pair of files on disk: the draft file's kind, else the target's own heads
    ("mtp") or prompt lookup ("lookup"); None where the file to read is missing or unreadable."""
    try:
        if draft is not None:
            return drafter_file(check_gguf(draft, "draft")).kind if draft.is_file() else None
        if target is None or not target.is_file():
            return None
        return "mtp" if drafts_itself(check_gguf(target)) else "lookup"
    except LocalspecError:
        return None
