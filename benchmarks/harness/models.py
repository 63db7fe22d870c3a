"""Models loaded in-process as `localspec run` loads them: every physical core, and prompts as it
renders them."""

from __future__ import annotations

from pathlib import Path

from localspec.backend.hardware import physical_cores
from localspec.backend.model import Model, ModelOptions
from localspec.session.prompt import render_chat


def load(path: Path, n_ctx: int = 4096, threads: int | None = None, **options: object) -> Model:
    """`path` with a context of `n_ctx`, on `threads` (default: the physical cores)."""
    threads = threads or physical_cores()
    return Model(path, ModelOptions(n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, **options))


def chat_text(model: Model, text: str) -> str:
    """`text` as one user turn in the model's chat template: what localspec sends."""
    return render_chat(model, [{"role": "user", "content": text}])
