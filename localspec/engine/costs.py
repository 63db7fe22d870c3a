"""What target and draft passes cost, learned from the steps actually run.

Nothing is measured before the first token and nothing is cached between runs: every step's draft
call and verification (timed up to the moment its logits were read and judged, which on a GPU is
when the work is done) is folded into running estimates, so costs follow the machine as it gets
busy or idle. A target pass over b tokens is modelled as a level (what one token costs now, which
moves fast) times a shape (what b tokens cost relative to one, which belongs to the hardware and
moves slowly): a busy core slows every pass alike, and the shape learned before still holds. Both
are kept per span of context length (each span twice as long as the one before): attention over a
long context makes every pass dearer and, on a CPU, wide passes dearer still (on the testbed a
3-token pass costs 1.3x a 1-token one at the start of a text and 1.9x after 3k tokens), so figures
learned on short texts must not decide for long ones (engine/pass_shape.py holds one span's). A
drafter's call is modelled as its first draft-model pass (with the call's own overhead) plus a part
per further pass, each at its depth's own figure where the drafter times its passes apart (a chain
of MTP heads: dear up to the last head, cheap after it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from localspec.drafters.base import CatchUp
from localspec.engine.pass_shape import Passes, clip

DRAFT_DECAY = 0.9  # per observed draft call
# Before a drafter has been timed, a draft-model pass is believed to cost this share of a target token.
PRIOR_DRAFT_SHARE = 0.1
SPAN_TOKENS = 512  # the first span of context length; each later one is twice as long
# A prompt pass shorter than this is timed too coarsely to price a drafter's reading by.
MIN_PROMPT_TOKENS = 64


def span(context: int) -> int:
    return (max(context, 0) // SPAN_TOKENS).bit_length()


@dataclass
class _DraftFit:
    """A drafter's calls: decayed means of a call's first pass (with whatever else the call costs
    besides its later passes) and of each later pass, the two timed apart: the first takes in the
    tokens accepted since the last call, two after a full acceptance, and a fit of call time on
    pass count could not tell them apart from calls that mostly draft the same few tokens (it
    priced every pass as dear as the first, so drafts stayed short and never taught it better)."""

    calls: float = 0.0
    call_s: float = 0.0
    passes: float = 0.0
    pass_s: float = 0.0
    runs_passes: bool = False  # prompt lookup runs none: its calls cost the same at any length
    # Depth (2: a call's second pass) -> [weight, seconds], where its passes were timed apart: a
    # chain of MTP heads re-reads the verified tokens at each head up to the last, so its passes
    # cost more to that depth than after it, and drafts priced at the dear ones stopped short.
    depths: dict[int, list[float]] = field(default_factory=dict)

    def add(self, passes: int, seconds: float, first: float | None, later: Sequence[float] = ()) -> None:
        """A call of `passes` passes took `seconds`, its first pass `first` (None: every pass
        counted is a later one), its later ones `later` where they were timed apart."""
        self.runs_passes = self.runs_passes or passes > 0
        if first is None and passes:
            self._later(passes, seconds, later)
            return
        head = min(first, seconds) if first is not None and passes > 1 else seconds
        ref = self.call_s / self.calls if self.calls > 0 else head
        self.calls, self.call_s = (
            self.calls * DRAFT_DECAY + 1,
            self.call_s * DRAFT_DECAY + clip(head, max(ref, 1e-7)),
        )
        if passes > 1:
            self._later(passes - 1, seconds - head, later)

    def _later(self, passes: int, seconds: float, timed: Sequence[float]) -> None:
        each = seconds / passes
        ref = self.pass_s / self.passes if self.passes > 0 else each
        self.passes = self.passes * DRAFT_DECAY + passes
        self.pass_s = self.pass_s * DRAFT_DECAY + passes * clip(each, max(ref, 1e-7))
        if len(timed) != passes or sum(timed) <= 0:
            return
        scale = seconds / sum(timed)  # as charged (beside other requests, what the batch paid)
        for depth, t in enumerate(timed, start=2):
            w, s = self.depths.setdefault(depth, [0.0, 0.0])
            x = t * scale if w == 0 else clip(t * scale, max(s / w, 1e-7))
            self.depths[depth] = [w * DRAFT_DECAY + 1, s * DRAFT_DECAY + x]

    def coefficients(self) -> tuple[float, float]:
        """(seconds of a call with one pass, seconds of each further pass)."""
        per_pass = self.pass_s / self.passes if self.passes > 0 else 0.0
        call = self.call_s / self.calls if self.calls > 0 else per_pass
        return call, per_pass if self.passes > 0 or not self.runs_passes else call

    def predict(self, passes: int) -> float:
        """A call's first pass, then each later one at its depth's figure where passes were
        timed apart (past the deepest timed, the deepest's), else at the mean of all."""
        call, per_pass = self.coefficients()
        if not self.depths:
            return call + per_pass * max(passes - 1, 0)
        # Depths are timed from 2 on without a gap (a call's later passes, in order).
        deepest = max(self.depths)
        w, s = self.depths[deepest]
        later = sum(s_d / w_d for d, (w_d, s_d) in self.depths.items() if d <= passes)
        return call + later + s / w * max(passes - deepest, 0)

    @property
    def w(self) -> float:
        return self.calls + self.passes


@dataclass
class LiveCosts:
    spans: dict[int, Passes] = field(default_factory=dict)  # span of context length -> its passes
    drafts: dict[str, _DraftFit] = field(default_factory=dict)
    context: int = 0  # tokens before the pass to come
    # The target's latest long prompt pass: seconds per token as charged, and charged over measured
    # (a simulated clock charges other than the wall): a drafter's reading, timed on the wall, is
    # priced through them.
    prompt_token_s: float = 0.0
    prompt_scale: float = 1.0

    def at(self, context: int) -> None:
        """The next passes follow `context` tokens."""
        self.context = context

    @property
    def _passes(self) -> Passes:
        here = span(self.context)
        if here not in self.spans:
            # A span not seen yet starts from the nearest one's figures (a better guess than none)
            # and is timed afresh: its one-token passes anchor it, and once one wide pass is
            # measured here, only widths measured here count (another span's shape is off for all).
            near = self.spans.get(min(self.spans, key=lambda s: abs(s - here), default=-1))
            prior = (near.shape if len(near.shape) > 1 else near.prior) if near else {}
            self.spans[here] = Passes(near.level if near else None, prior=dict(prior))
        return self.spans[here]

    @property
    def level(self) -> float | None:
        return self._passes.level

    @property
    def seen(self) -> dict[int, int]:
        return self._passes.seen

    # --- learning --------------------------------------------------------------------------
    def observe_verify(self, batch: int, seconds: float) -> None:
        """A target pass over `batch` tokens (with its verification) took `seconds`."""
        if seconds > 0:
            self._passes.observe(batch, seconds)

    def observe_prompt(self, tokens: int, charged: float, measured: float) -> None:
        """The target evaluated `tokens` prompt tokens, charged `charged` seconds, measured `measured`."""
        if tokens >= MIN_PROMPT_TOKENS and charged > 0 and measured > 0:
            self.prompt_token_s, self.prompt_scale = charged / tokens, charged / measured

    def observe_draft(
        self,
        source: str,
        passes: int,
        seconds: float,
        first: float | None = None,
        flat: bool = False,
        later: Sequence[float] = (),
    ) -> None:
        """A call to drafter `source` ran `passes` draft-model passes in `seconds`, the first of
        them in `first` (None: all alike), the later ones in `later` where timed apart; `flat`:
        one pass drafted every token (a block drafter), so the call is priced as one at any
        length, as prompt lookup's are."""
        fit = self.drafts.setdefault(source, _DraftFit())
        fit.add(0 if flat else passes, max(seconds, 0.0), None if flat else first, () if flat else later)

    # --- predictions -----------------------------------------------------------------------
    @property
    def anchored(self) -> bool:
        """Whether the target alone has been timed at this context length (twice: the faster of its
        first two passes)."""
        return self.seen.get(1, 0) >= 2

    @property
    def wide_timed(self) -> bool:
        """Whether a pass wider than one token has been timed at this context length."""
        return any(b > 1 for b in self.seen)

    @property
    def span(self) -> int:
        return span(self.context)

    def one_token_pass(self, at_span: int, batch: int, seconds: float) -> float:
        """What a one-token pass cost when one over `batch` tokens at that span took `seconds`; 0
        where that is not known (the span's one-token passes or that width not timed)."""
        passes = self.spans.get(at_span)
        if passes is None or passes.seen.get(1, 0) < 2 or not passes.seen.get(batch):
            return 0.0
        # Never above the pass itself (noisy first passes can make a wide one look cheaper).
        return seconds / max(passes.relative(batch), 1.0)

    def verify(self, batch: int) -> float:
        """Seconds for a target pass over `batch` tokens, with its verification."""
        passes = self._passes
        return (passes.level or 1.0) * passes.relative(batch)

    def relative(self, batch: int) -> float:
        """What a target pass over `batch` tokens costs relative to a one-token pass."""
        return self._passes.relative(batch)

    def draft(self, source: str, passes: int, reading: CatchUp | None = None) -> float:
        """Seconds for a call to `source` that runs `passes` draft-model passes. Before it has been
        timed, a `reading` it timed prices its passes at that reading's share of the target's
        prompt pass (a draft as dear as its target cannot pay on a long prompt, whatever it accepts)."""
        fit = self.drafts.get(source)
        if fit is None or fit.w <= 0:
            share = PRIOR_DRAFT_SHARE
            if reading is not None and self.prompt_token_s > 0:
                share = reading.token_s * self.prompt_scale / self.prompt_token_s
            return share * self.verify(1) * passes
        return fit.predict(passes)

    def read(self, reading: CatchUp) -> float:
        """Seconds to charge for a drafter's `reading`."""
        return reading.seconds * self.prompt_scale

    def summary(self, batch: int) -> dict[str, float]:
        """The figures decisions rest on now, in milliseconds (for bench and the stats)."""
        out = {"target_1_ms": 1e3 * self.verify(1), f"target_{batch}_ms": 1e3 * self.verify(batch)}
        for source, fit in self.drafts.items():
            fixed, per_pass = fit.coefficients()
            out[f"{source}_call_ms"] = 1e3 * fixed
            out[f"{source}_pass_ms"] = 1e3 * per_pass
        return out
