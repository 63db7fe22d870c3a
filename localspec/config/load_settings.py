"""The settings fixed when models load: the context, the chat template, threads, GPU layers, flash
attention, RPC servers and a server's slots (config/settings.py joins them with the rest)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from localspec.backend.endpoints import parse_endpoints
from localspec.backend.model_options import FLASH_ATTN_CHOICES
from localspec.config.about import LOAD, MODEL, PERFORMANCE, SERVER, described
from localspec.config.checks import jinja, optional, parses, proportions, within
from localspec.config.defaults import MAX_CTX


@dataclass(frozen=True)
class LoadSettings:
    """Settings that size what is loaded, in the order --help shows them."""

    ctx: int = field(
        default=0,
        metadata=described(
            flag="--ctx",
            short=("-c",),
            panel=MODEL,
            phase=LOAD,
            help="Context size in tokens (default 0: the model's, at most 4096); one the machine's memory "
            "cannot hold is refused before anything is loaded.",
            check=within(0, MAX_CTX),
        ),
    )
    chat_template: str | None = field(
        default=None,
        metadata=described(
            flag="--chat-template",
            panel=MODEL,
            metavar="FILE",
            phase=LOAD,
            alias=False,
            file=True,
            help="Render conversations (and a server's tools) with this Jinja chat template, a file, "
            "instead of the model's own.",
            check=optional(jinja),
        ),
    )
    rpc: str | None = field(
        default=None,
        metadata=described(
            flag="--rpc",
            panel=MODEL,
            metavar="HOST:PORT,...",
            phase=LOAD,
            alias=False,
            help="Spread the target's layers over llama.cpp RPC servers (HOST:PORT,...; start them with "
            "`localspec rpc-server`) and this machine's GPU; the draft stays here. The protocol "
            "has no authentication: trusted networks only.",
            check=optional(parses(parse_endpoints)),
        ),
    )
    threads: int | None = field(
        default=None,
        metadata=described(
            flag="--threads",
            short=("-t",),
            panel=PERFORMANCE,
            phase=LOAD,
            alias=False,
            help="Target CPU threads (default: physical cores).",
            check=optional(within(1, 1024)),
        ),
    )
    draft_threads: int | None = field(
        default=None,
        metadata=described(
            flag="--draft-threads",
            short=("-td",),
            panel=PERFORMANCE,
            phase=LOAD,
            alias=False,
            help="Draft CPU threads (default: physical cores).",
            check=optional(within(1, 1024)),
        ),
    )
    gpu_layers: int | None = field(
        default=None,
        metadata=described(
            flag="--gpu-layers",
            short=("-ngl",),
            panel=PERFORMANCE,
            phase=LOAD,
            alias=False,
            help="Target layers on the GPU (default: all when llama.cpp has GPU offload, else 0).",
            check=optional(within(0, math.inf)),
        ),
    )
    draft_gpu_layers: int | None = field(
        default=None,
        metadata=described(
            flag="--draft-gpu-layers",
            short=("-ngld",),
            panel=PERFORMANCE,
            phase=LOAD,
            alias=False,
            help="Draft layers on the GPU (default as --gpu-layers).",
            check=optional(within(0, math.inf)),
        ),
    )
    flash_attn: str = field(
        default="auto",
        metadata=described(
            flag="--flash-attn",
            short=("-fa",),
            panel=PERFORMANCE,
            phase=LOAD,
            alias=False,
            help="Flash attention: 'auto' (on a CPU off for the draft and for an F32/F16/BF16 target, "
            "whose passes after a long prompt it makes far dearer; else llama.cpp's choice), 'on' or "
            "'off'. Off, a CPU generates faster after a long prompt and reads it slower; a quantized "
            "target's drafted greedy output then parts from its own at near-ties more often.",
            choices=FLASH_ATTN_CHOICES,
        ),
    )
    tensor_split: str | None = field(
        default=None,
        metadata=described(
            flag="--tensor-split",
            panel=PERFORMANCE,
            metavar="N,N,...",
            phase=LOAD,
            alias=False,
            help="The target's share on each device, as proportions: the --rpc servers in order, then the "
            "local GPUs (e.g. 3,1; default: by free memory).",
            check=optional(
                parses(proportions, "must be non-negative numbers separated by commas, not all zero")
            ),
        ),
    )
    parallel: int = field(
        default=0,
        metadata=described(
            flag="--parallel",
            panel=SERVER,
            phase=LOAD,
            alias=False,
            server_only=True,
            help="Server: requests generated at once, their passes made together; beyond them, requests "
            "queue (0: up to 4, as memory allows; 1 with a drafter that reads the target's state or a "
            "recurrent model).",
            check=within(0, 64),
        ),
    )
    slots: int = field(
        default=4,
        metadata=described(
            flag="--slots",
            panel=SERVER,
            phase=LOAD,
            alias=False,
            server_only=True,
            help="Server: conversations kept (in host memory, as llama.cpp state) after their reply; a "
            "request resumes the one sharing the longest prefix with it and evaluates only the "
            "rest.",
            check=within(1, 64),
        ),
    )
