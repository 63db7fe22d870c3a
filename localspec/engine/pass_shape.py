"""A target pass over b tokens at one span of context length: a level (what one token costs now,
which moves fast) times a shape (what b tokens cost relative to one, which belongs to the hardware
and moves slowly), learned from the passes run (engine/costs.py keeps one per span)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field

LEVEL_RATE = 0.3  # how fast the level follows a new observation
SHAPE_RATE = 0.15  # how fast a batch size's relative cost does
LOAD_SHIFT = 0.25  # a pass this much off its estimate moves the level, its width's shape barely
# One observation moves an estimate at most this factor: a pass the OS preempted is not the new normal.
OUTLIER = 2.0
# Before a batch wider than one token has been seen, it is believed to cost this much more per
# extra token (a CPU's figure; a GPU's first wide pass corrects it at once).
PRIOR_SLOPE = 0.25
# Each width's figure is shrunk towards the line through all widths' by this many pseudo-passes: a
# width timed once at a bad moment would otherwise price every draft through it too high, and
# drafts that never grow past it would never time wider passes to correct it.
SHAPE_PRIOR = 2.0


def clip(x: float, ref: float) -> float:
    return min(max(x, ref / OUTLIER), ref * OUTLIER)


@dataclass
class Passes:
    """Target passes at one span of context length: a level and a shape."""

    level: float | None = None  # seconds of a one-token target pass, now
    shape: dict[int, float] = field(default_factory=lambda: {1: 1.0})  # batch -> cost relative to one token
    seen: dict[int, int] = field(default_factory=dict)  # batch -> passes of that width observed
    prior: dict[int, float] = field(default_factory=dict)  # another span's shape, until one is measured here
    # _smoothed(), until the next pass
    _fit: tuple[float, dict[int, float], list[int]] | None = field(default=None, init=False, repr=False)

    def observe(self, batch: int, seconds: float) -> None:
        self._learn(batch, seconds)
        self._fit = None

    def _learn(self, batch: int, seconds: float) -> None:
        relative = self.relative(batch)
        n = self.seen.get(batch, 0)
        self.seen[batch] = n + 1
        # A width's first two passes set its figure, the faster of them: a process's first passes
        # also page in the weights (and on a GPU, build its kernels).
        if self.level is None:
            self.level = seconds / relative
            if batch > 1:
                self.shape[batch] = relative
        elif batch == 1 and n < 2:
            # One-token passes anchor the shape the wider ones were measured in.
            anchor = seconds if n == 0 else min(seconds, self.level)
            for b in self.shape:
                self.shape[b] *= self.level / anchor
            self.level, self.shape[1] = anchor, 1.0
        elif batch > 1 and n < 2:
            observed = seconds / self.level
            self.shape[batch] = (
                observed if n == 0 or batch not in self.shape else min(observed, self.shape[batch])
            )
        else:
            surprise = seconds / (self.level * relative)
            self.level += LEVEL_RATE * (clip(seconds / relative, self.level) - self.level)
            # A pass far off its estimate is mostly the machine's load changing, which moves every
            # width alike: were the shape to take its share of it, it would keep that share for
            # good (level times shape is all a wide pass tells; only one-token passes, rare while
            # drafting, part them again), and every estimate priced through it would stay off.
            # It still takes a little, so that a width's figure set wrong at first comes right.
            if batch > 1:
                rate = SHAPE_RATE if abs(surprise - 1.0) <= LOAD_SHIFT else SHAPE_RATE / 5
                own = self.shape.get(batch, relative)
                self.shape[batch] = own + rate * (clip(seconds / self.level, own) - own)

    def _smoothed(self) -> tuple[float, dict[int, float], list[int]]:
        """The slope wider passes grow by, each width's figure shrunk towards the shape's lines,
        and the widths in order (kept: the token rule asks for many widths per draft token)."""
        if self._fit is None:
            own = len(self.shape) > 1 or not self.prior
            shape, counts = (self.shape, self.seen) if own else (self.prior, {})
            weight = {b: max(counts.get(b, 1), 1) for b in shape}
            settled = [b for b in shape if b > 1 and (counts.get(b, 0) >= 2 or not own)]
            line, tail = _lines(shape, weight, settled)
            smoothed = {
                b: (weight[b] * r + SHAPE_PRIOR * line(b)) / (weight[b] + SHAPE_PRIOR)
                for b, r in shape.items()
            } | {1: 1.0}
            self._fit = tail, smoothed, sorted(smoothed)
        return self._fit

    def relative(self, batch: int) -> float:
        tail, smoothed, sizes = self._smoothed()
        if len(smoothed) == 1:
            return 1.0 + tail * (batch - 1)
        if batch in smoothed:
            return smoothed[batch]
        if batch > sizes[-1]:
            return smoothed[sizes[-1]] + tail * (batch - sizes[-1])
        i = bisect_left(sizes, batch)
        lo, hi = sizes[i - 1], sizes[i]
        w = (batch - lo) / (hi - lo)
        return smoothed[lo] * (1 - w) + smoothed[hi] * w


def _lines(
    shape: dict[int, float], weight: dict[int, int], wide: list[int]
) -> tuple[Callable[[int], float], float]:
    """The shape's prior for each width and the slope beyond the widest, from two weighted fits:
    the line through (1, 1), and the line through the `wide` widths alone (those timed at least
    twice, as a width's own figure is: one slow pass at a width never timed before is noise as
    often as it is the shape). A CPU's passes grow faster once they are wide (on the testbed 1, 3,
    5 and 9 tokens cost 1, 1.36, 2.04 and 3.19x): the line through (1, 1), fitted mostly on
    3-token passes, priced a 9-token one at 2.4x, so drafts grew past what paid until wide passes
    had been timed again and again. A GPU's passes stay flat, and both lines with them. The wide
    line's slope is held to twice the other's, so two near widths timed at noisy moments cannot
    price every longer draft out."""
    den = sum(weight[b] * (b - 1) ** 2 for b in shape)
    slope = (
        max(sum(weight[b] * (r - 1.0) * (b - 1) for b, r in shape.items()) / den, 0.0) if den else PRIOR_SLOPE
    )
    steep, start = slope, 1.0
    if len(wide) >= 2:
        total = sum(weight[b] for b in wide)
        mean_b = sum(weight[b] * b for b in wide) / total
        mean_r = sum(weight[b] * shape[b] for b in wide) / total
        spread = sum(weight[b] * (b - mean_b) ** 2 for b in wide)
        steep = min(
            max(sum(weight[b] * (b - mean_b) * (shape[b] - mean_r) for b in wide) / spread, slope), 2 * slope
        )
        start = mean_r - steep * (mean_b - 1)
    return (lambda b: max(1.0 + slope * (b - 1), start + steep * (b - 1))), steep
