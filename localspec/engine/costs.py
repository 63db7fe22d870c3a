"""Decode costs of a model pair, measured once per model file and machine settings, then cached.

The auto draft-length controller needs two figures: what a target pass over b tokens costs
(verification of b-1 drafts) at the current context length, and what one draft token costs.
They are properties of the models and the machine, not of the prompt, so measuring them once keeps
runs repeatable. Passes are timed at two context lengths, since attention makes every extra
verified token dearer as the context grows; between and beyond them costs are linear in length."""

from __future__ import annotations

import json
import statistics
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from localspec.backend.model import Model
from localspec.json_file import write_json

CACHE_FILE = "decode-costs.json"
CACHE_VERSION = 5
MEASURED_BATCHES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
FAR_CONTEXT = 512  # the second context length passes are timed at (capped at half the context)
REPEATS = 5  # medians of a few runs
DRAFT_TOKENS_PER_ROUND = 4
# A draft that sat out some steps catches up on at most this many tokens (drafters/view.py)
MAX_CATCH_UP = 16


def _interpolate(table: dict[int, float], x: int) -> float:
    sizes = sorted(table)
    if len(sizes) == 1 or x <= sizes[0]:
        return table[sizes[0]]
    if x >= sizes[-1]:
        last, prev = sizes[-1], sizes[-2]
        return table[last] + (table[last] - table[prev]) / (last - prev) * (x - last)
    i = bisect_left(sizes, x)
    lo, hi = sizes[i - 1], sizes[i]
    w = (x - lo) / (hi - lo)
    return table[lo] * (1 - w) + table[hi] * w


@dataclass(frozen=True)
class DecodeCosts:
    near: dict[int, float]  # batch size -> seconds for one target pass at an empty context
    far: dict[int, float] = field(default_factory=dict)  # the same at context length far_context
    far_context: int = 0
    draft_token: dict[str, float] = field(default_factory=dict)  # drafter name -> seconds per drafted token
    # Extra seconds for a step's first draft token: the draft first evaluates what it lacks (the
    # target's own token, and the last draft token when all were accepted) in one small batch.
    draft_catch_up: dict[str, float] = field(default_factory=dict)
    draft_token_far: dict[str, float] = field(default_factory=dict)  # the same at far_context
    draft_catch_up_far: dict[str, float] = field(default_factory=dict)
    # Extra seconds per token for a draft that fell further behind (it sat out some steps): its first
    # pass evaluates up to MAX_CATCH_UP tokens instead of two.
    draft_behind: dict[str, float] = field(default_factory=dict)

    def draft(self, source: str, k: int, context: int = 0, behind: int = 0) -> float:
        """Seconds for `source` to draft k tokens after `context` tokens, `behind` generated tokens
        having gone by since it last drafted."""
        if k <= 0:
            return 0.0
        lag = max(0, min(behind, MAX_CATCH_UP) - 2) * self.draft_behind.get(source, 0.0)
        near = k * self.draft_token.get(source, 0.0) + self.draft_catch_up.get(source, 0.0) + lag
        if source not in self.draft_token_far or self.far_context <= 0:
            return near
        far = k * self.draft_token_far[source] + self.draft_catch_up_far.get(source, 0.0) + lag
        return max(near + (far - near) * context / self.far_context, 0.0)

    def verify(self, batch: int, context: int = 0) -> float:
        """Seconds for a target pass over `batch` tokens after `context` cached tokens."""
        near = _interpolate(self.near, batch)
        if not self.far or self.far_context <= 0:
            return near
        far = _interpolate(self.far, batch)
        return max(near + (far - near) * context / self.far_context, 1e-9)


def _key(model: Model) -> str:
    st = model.path.stat()
    o = model.options
    return (
        f"v{CACHE_VERSION}|{model.path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
        f"|t{o.n_threads}/{o.n_threads_batch}|gpu{o.n_gpu_layers}|b{model.n_batch}|c{model.n_ctx}"
    )


def _timed_pass(model: Model, batch: int) -> float:
    base = len(model.cached)
    t0 = time.perf_counter()
    model.decode([100 % model.n_vocab] * batch, all_logits=True)
    elapsed = time.perf_counter() - t0
    if not model.truncate(base):
        raise RuntimeError("cannot roll back")
    return elapsed


def _time_batches(model: Model, sizes: list[int]) -> dict[int, float]:
    """Median time per pass for each size, sizes interleaved so that passing load hits all alike."""
    times: dict[int, list[float]] = {b: [] for b in sizes}
    for rep in range(REPEATS + 1):
        for b in sizes:
            elapsed = _timed_pass(model, b)
            if rep:  # the first round warms caches and pages in the weights
                times[b].append(elapsed)
    return {b: statistics.median(t) for b, t in times.items()}


def _time_draft_tokens(target: Model, draft: Model, batch: int) -> tuple[float, float, float]:
    """Median times of a draft step's first pass (a 2-token catch-up), of each further draft token,
    and of a first pass after sitting out (MAX_CATCH_UP tokens), the way drafting runs: right after
    a target pass, which has pushed the draft's weights out of the CPU caches."""
    first, rest, lagging = [], [], []
    for rep in range(REPEATS + 1):
        _timed_pass(target, batch)
        base = len(draft.cached)
        for i in range(DRAFT_TOKENS_PER_ROUND):
            t0 = time.perf_counter()
            draft.decode([100 % draft.n_vocab] * (2 if i == 0 else 1), all_logits=False)
            if rep:
                (first if i == 0 else rest).append(time.perf_counter() - t0)
        if not draft.truncate(base):
            raise RuntimeError("cannot roll back")
        _timed_pass(target, batch)
        t0 = time.perf_counter()
        draft.decode([100 % draft.n_vocab] * MAX_CATCH_UP, all_logits=False)
        if rep:
            lagging.append(time.perf_counter() - t0)
        draft.truncate(base)
    return statistics.median(first), statistics.median(rest), statistics.median(lagging)


def _live(key: str) -> bool:
    """Whether a cache key is of this version and every model file it names still exists."""
    parts = key.split("|")
    paths = [parts[i + 1] for i, part in enumerate(parts[:-1]) if part == f"v{CACHE_VERSION}"]
    return bool(paths) and all(Path(p).exists() for p in paths)


class CostCache:
    def __init__(self, path: Path | None = None, notify: Callable[[str], None] = lambda _m: None) -> None:
        self.path = path or Path(platformdirs.user_cache_dir("localspec")) / CACHE_FILE
        self.notify = notify  # told once when a damaged file is dropped

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            data = None
        if not isinstance(data, dict):
            self.notify(f"the decode-cost cache {self.path} was damaged: measuring again")
            self.notify = lambda _m: None
            return {}
        return data

    def _write(self, data: dict) -> None:
        # Entries of files that are gone, or of older versions, would only pile up.
        data = {k: v for k, v in data.items() if _live(k)}
        try:
            write_json(self.path, data)
        except OSError:
            pass  # a read-only cache only costs a new measurement next time

    def measure(self, model: Model, max_batch: int, far: bool) -> tuple[dict[int, float], dict[int, float], int]:
        """(near table, far table, far context) for batch sizes up to max_batch, measuring what the
        cache lacks. Measuring empties the model's KV cache (its users re-sync from their context)."""
        data = self._read()
        key = _key(model)
        entry = data.get(key, {})
        try:
            near = {int(b): float(t) for b, t in entry.get("near", {}).items()}
            far_t = {int(b): float(t) for b, t in entry.get("far", {}).items()}
        except (AttributeError, TypeError, ValueError):  # a damaged entry is measured again
            entry, near, far_t = {}, {}, {}
        far_context = min(FAR_CONTEXT, model.n_ctx // 2) if far else 0
        wanted = sorted({b for b in MEASURED_BATCHES if b <= max_batch} | {min(max_batch, MEASURED_BATCHES[-1]), 1})
        missing_near = [b for b in wanted if b not in near]
        missing_far = [b for b in wanted if b not in far_t] if far_context else []
        if missing_near or missing_far:
            model.truncate(0)
            if missing_near:
                near.update(_time_batches(model, missing_near))
            if missing_far:
                model.decode([100 % model.n_vocab] * far_context, all_logits=False)
                far_t.update(_time_batches(model, missing_far))
                model.truncate(0)
            data[key] = {
                "near": {str(b): t for b, t in sorted(near.items())},
                "far": {str(b): t for b, t in sorted(far_t.items())},
                "far_context": far_context or entry.get("far_context", 0),
            }
            self._write(data)
        return {b: near[b] for b in wanted}, ({b: far_t[b] for b in wanted} if far_context else {}), far_context


    def draft_costs(self, target: Model, draft: Model, batch: int, far_context: int) -> list[float]:
        """[first pass, each further token, a first pass after sitting out] in seconds for this
        draft beside this target, at an empty context and then after far_context tokens."""
        data = self._read()
        key = f"pair|{_key(target)}|{_key(draft)}|c{far_context}"
        entry = data.get(key)
        if not (isinstance(entry, list) and len(entry) == 6 and all(isinstance(x, (int, float)) for x in entry)):
            entry = []
            for context in (0, far_context):
                target.truncate(0)
                draft.truncate(0)
                filler = [100 % target.n_vocab] * context
                target.decode(filler, all_logits=False)
                draft.decode(filler, all_logits=False)
                entry += list(_time_draft_tokens(target, draft, batch))
            target.truncate(0)
            draft.truncate(0)
            data[key] = entry
            self._write(data)
        return [float(x) for x in entry]


def pair_costs(target: Model, draft: Model | None, draft_max: int, cache: CostCache | None = None) -> DecodeCosts:
    """The costs of this pair, measured where the cache lacks them."""
    cache = cache or CostCache()
    # A pass must fit one batch, and at the far context the context too (a tiny --ctx caps both).
    widest = max(1, min(draft_max + 1, target.n_batch, target.n_ctx // 2))
    near, far, far_context = cache.measure(target, widest, far=True)
    costs = DecodeCosts(near, far, far_context, {"ngram": 0.0}, {"ngram": 0.0})
    if draft is not None:
        first, rest, lagging, first_far, rest_far, lagging_far = cache.draft_costs(target, draft, min(widest, 8), far_context)
        for name in ("draft-model", "tree"):  # a tree costs its draft model per drafted token too
            costs.draft_token[name], costs.draft_catch_up[name] = rest, max(first - rest, 0.0)
            costs.draft_token_far[name], costs.draft_catch_up_far[name] = rest_far, max(first_far - rest_far, 0.0)
            lag = (lagging + lagging_far - first - first_far) / 2
            costs.draft_behind[name] = max(lag / (MAX_CATCH_UP - 2), 0.0)
    return costs
