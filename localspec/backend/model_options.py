"""How a model is loaded: its context, batch, threads, devices and the extras a drafter needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import llama_cpp

FLASH_ATTN_CHOICES = ("auto", "on", "off")
# GGUF general.file_type of weights left unquantized: ALL_F32, MOSTLY_F16, MOSTLY_BF16
UNQUANTIZED_FILE_TYPES = (0, 1, 32)


@dataclass(frozen=True)
class HeadFile:
    """A drafter in a file of its own that runs over the target's state: an EAGLE-3 head
    (backend/eagle3.py), a DFlash block drafter (backend/dflash.py) or Gemma 4's assistant
    (backend/assistant.py)."""

    path: Path
    layers: tuple[int, ...]  # the target's layers whose inputs it reads
    n_gpu_layers: int = 0
    kind: str = "eagle3"  # "dflash", "dspark", "gemma4-assistant" (backend/drafter_files.py's names)


@dataclass(frozen=True)
class ModelOptions:
    n_ctx: int = 0  # 0: the model's training context, capped at DEFAULT_CTX
    n_batch: int = 512
    n_threads: int = 1
    n_threads_batch: int = 1
    n_gpu_layers: int = 0
    devices: tuple[int, ...] | None = None  # what offloaded layers go to (None: this machine's GPUs)
    tensor_split: tuple[float, ...] = ()  # in what proportions (empty: by free memory)
    rollback_snapshots: int = 0  # recurrent-state snapshots (llama.cpp n_rs_seq) for partial rollback
    n_seq_max: int = 1  # > 1 for tree drafting: branches live in separate sequences of one unified cache
    lanes: int = 1  # generations at once (backend/lanes.py): the context holds n_ctx tokens for each
    slots: int = 0  # token sequences kept (in host memory) after their generation, a server's conversations
    chat_template: str | None = None  # the user's, over the GGUF's
    # Load the NextN heads too, and keep every pass's hidden states for them (backend/mtp.py)
    mtp: bool = False
    head_file: HeadFile | None = None  # a drafter to load over the target, reading its layer inputs
    # Greedy passes may take their argmax on the GPU (backend/top_tokens.py) when all layers are there.
    device_argmax: bool = True
    flash_attn: str = "auto"  # one of FLASH_ATTN_CHOICES (flash_attn_type)
    verbose: bool = False


def flash_attn_type(choice: str) -> int:
    """llama.cpp's flash attention setting for `choice` ('auto': llama.cpp's own choice, on wherever
    its backend has the kernel, a CPU included)."""
    return {
        "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
    }.get(choice, llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO)


def flash_attn_for(choice: str, offloaded: bool, draft: bool, file_type: object) -> str:
    """What --flash-attn `choice` means for one model: as given, except 'auto' on a CPU (no layer
    offloaded), which is off for a draft and for an unquantized target (F32, F16, BF16), and
    llama.cpp's choice (on) for a quantized target.

    On a CPU llama.cpp's flash-attention kernel reads the cache again for every token of a pass:
    after 2k tokens of context a one-token pass costs 1.6-2.5x what it does without it and a
    9-token verification 4-6.5x (benchmarks/costs/pass_shape.py), so speculation, which lives by
    wide passes about as dear as narrow ones, loses; the prompt is read 20-36% faster with it. Off,
    an unquantized model's batched logits lie closer to its one-token ones (5 tokens at once
    against one by one: 0.030 against 0.125 at 2k tokens), but a quantized model's move further
    (0.44 against 0.00 at 100 tokens), and greedy drafted output would part from the target
    alone's more often: its target keeps llama.cpp's choice. A draft's numerics never reach the
    output (the target verifies every token), only its speed does."""
    if choice != "auto" or offloaded:
        return choice
    return "off" if draft or file_type in UNQUANTIZED_FILE_TYPES else "auto"
