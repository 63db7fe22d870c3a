"""How a model is loaded: its context, batch, threads, devices and the extras a drafter needs."""

from __future__ import annotations

from dataclasses import dataclass

import llama_cpp

FLASH_ATTN_CHOICES = ("auto", "on", "off")


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
    slots: int = 0  # token sequences kept (in host memory) after their generation, a server's conversations
    chat_template: str | None = None  # the user's, over the GGUF's
    # Load the NextN heads too, and keep every pass's hidden states for them (backend/mtp.py)
    mtp: bool = False
    # Greedy passes may take their argmax on the GPU (backend/top_tokens.py) when all layers are there.
    device_argmax: bool = True
    flash_attn: str = "auto"  # one of FLASH_ATTN_CHOICES (flash_attn_type)
    verbose: bool = False


def flash_attn_type(choice: str) -> int:
    """llama.cpp's flash attention setting for `choice` ('auto': llama.cpp's own choice, on where the
    backend has the kernel, which a CPU has). Off, a CPU generates faster after a long prompt, a
    wide pass above all (on the testbed after 2k tokens a one-token pass 1.6-2.4x, a 9-token
    verification 4-6x), and reads the prompt 20-36% slower; but its batched passes then differ more
    from one-token ones, so drafted greedy output parts from the target alone's at near-ties more
    often (26 prompts of the Q4_1 with prompt lookup: 12 or more partings against 5). The default
    keeps llama.cpp's."""
    return {
        "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
    }.get(choice, llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO)
