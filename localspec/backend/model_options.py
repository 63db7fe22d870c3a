"""How a model is loaded: its context, batch, threads, devices and the extras a drafter needs."""

from __future__ import annotations

from dataclasses import dataclass


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
    verbose: bool = False
