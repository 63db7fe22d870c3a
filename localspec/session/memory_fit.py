"""A context fitted to the machine: its KV cache, as the files' headers price it, refused in one line
before anything is loaded where the machine's memory cannot hold it (llama.cpp would allocate until
the kernel killed the process, and others with it)."""

from __future__ import annotations

from collections.abc import Sequence

from localspec.backend.gguf_file import GGUFInfo
from localspec.backend.gguf_hparams import kv_bytes_per_token
from localspec.backend.hardware import available_memory_bytes
from localspec.config.settings import Settings
from localspec.errors import LocalspecError


def kv_cache_bytes(ctx: int, infos: Sequence[GGUFInfo]) -> int:
    """What `ctx` tokens of KV cache take for each model of `infos`, as their headers price it (0
    where none says)."""
    per_token = [
        kv_bytes_per_token(info.fields, info.fields.get("general.architecture", "")) for info in infos
    ]
    return ctx * sum(p for p in per_token if p)


def check_context_fits(ctx: int, infos: list[GGUFInfo], available: int | None = None) -> None:
    """`ctx` tokens of KV cache for each model of `infos` (target and draft keep one each)."""
    if ctx <= 0:
        return  # the model's own, at most 4096: what every model holds
    need = kv_cache_bytes(ctx, infos)
    have = available_memory_bytes() if available is None else available
    if have is not None and need > have:
        fits = max(have // max(need // ctx, 1), 1)
        flag = Settings.about("ctx").flag
        raise LocalspecError(
            f"{flag} {ctx:,} needs {need / 2**30:.1f} GiB of KV cache, and this machine has "
            f"{have / 2**30:.1f} GiB available: at most about {fits:,} tokens fit"
        )
