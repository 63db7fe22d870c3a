"""The MTP testbed: a target of an MTP architecture (llama.cpp's glm4moe) whose NextN head predicts
what the target will (mtp_model.py), at SmolLM2-135M's width and with its tokenizer, so that
ordinary prompts work, and a main pass costing ~6x a head pass, as the heavy testbed's target costs
~6x its draft.

    python -m benchmarks.testbeds.make_mtp_testbed DIR [--layers 48] [--noise 0.025] [--heads 1] [--check 3]

writes DIR/mtp-heavy.gguf (F16); with --heads N > 1, DIR/mtp-heavy-Nheads.gguf, of llama.cpp's mimo2
(whose N heads are chained, each drafting its own depth), every head a copy of the block. The
tokenizer is read from the testbed's draft (DIR/draft-q4_1.gguf, from make_testbed.py) or the demo
model. The weights are random: its text is no language, but it is greedy-stable and the head's
acceptance is known. After writing, the script checks on a few prompts how often the head's greedy
drafts are accepted (--check N prompts, 0 to skip), and the cost of a head pass against a main
pass."""

from __future__ import annotations

from pathlib import Path

import gguf

from benchmarks.harness import models, options
from benchmarks.harness.summary import median
from benchmarks.testbeds.mtp_model import MtpSpec, Vocabulary, write_mtp_model
from localspec.config.defaults import embedded_model
from localspec.drafters.mtp import MtpDrafter
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams

TOKENIZER_KEYS = ("tokenizer.", "general.architecture")
CHECK_PROMPTS = (
    "Why is the sky blue?",
    "Write a haiku about autumn.",
    "def fibonacci(n):",
    "Translate to French: good morning",
)


def smollm2_vocabulary(source: Path) -> Vocabulary:
    """A Vocabulary (mtp_model.py) copying `source`'s tokenizer keys."""
    reader = gguf.GGUFReader(str(source))

    def write(w: gguf.GGUFWriter) -> int:
        n_vocab = 0
        for name, field in reader.fields.items():
            if not name.startswith("tokenizer."):
                continue
            kind = field.types[0]
            if kind == gguf.GGUFValueType.ARRAY:
                values = field.contents()
                w.add_key_value(name, values, kind, sub_type=field.types[-1])
                if name == "tokenizer.ggml.tokens":
                    n_vocab = len(values)
            else:
                w.add_key_value(name, field.contents(), kind)
        return n_vocab

    return write


def check(path: Path, prompts: int) -> None:
    with models.load(path, n_ctx=1024, mtp=True) as target:
        assert target.head is not None
        engine = SpeculativeEngine(target, MtpDrafter(target.head), "mtp")
        config = GenerationConfig(
            max_tokens=64, sampling=SamplingParams(temperature=0.0), draft_mode="fixed", draft_max=4
        )
        drafted = accepted = 0
        for text in CHECK_PROMPTS[:prompts]:
            stats = drain(engine.generate(target.tokenize(text), config)).stats
            drafted, accepted = drafted + stats.n_drafted, accepted + stats.n_accepted
        passes = target.passes
        busy = target.busy_s
        head_passes, head_busy = target.head.passes, target.head.busy_s
        print(
            f"greedy acceptance at 4 drafted tokens: {accepted}/{drafted} = {accepted / max(drafted, 1):.3f}"
        )
        target.prefill(target.tokenize(CHECK_PROMPTS[0]))
        main = [
            _timed(lambda: target.decode([target.cached[-1]], all_logits=False), target) for _ in range(12)
        ]
        head = [
            _timed(lambda: target.head.decode([target.cached[-1]], all_logits=False), target.head)
            for _ in range(12)
        ]
        print(
            f"a main pass {median(main) * 1e3:.1f} ms, a head pass "
            f"{median(head) * 1e3:.1f} ms "
            f"(ratio {median(main) / median(head):.1f}); during the check: "
            f"{busy / max(passes, 1) * 1e3:.1f} ms per target pass, "
            f"{head_busy / max(head_passes, 1) * 1e3:.1f} ms per head pass"
        )


def _timed(fn, model) -> float:
    before = model.busy_s
    fn()
    return model.busy_s - before


def main() -> None:
    ap = options.parser(__doc__)
    ap.add_argument("dir", type=Path, help="the testbed folder (make_testbed.py's)")
    ap.add_argument("--layers", type=int, default=48, help="main blocks (the first real, the rest no-ops)")
    ap.add_argument(
        "--noise", type=float, default=0.025, help="relative noise on the head's copy of the block"
    )
    ap.add_argument(
        "--heads", type=int, default=1, help="NextN heads (more than one: a mimo2 target, its heads chained)"
    )
    ap.add_argument(
        "--check", type=int, default=3, help="prompts to check the head's acceptance on (0: none)"
    )
    ap.add_argument(
        "--tokenizer",
        type=Path,
        help="GGUF whose tokenizer to copy (default: DIR/draft-q4_1.gguf, or the demo model)",
    )
    args = options.parse(ap)
    source = args.tokenizer or args.dir / "draft-q4_1.gguf"
    if not source.exists():
        source = embedded_model()
    args.dir.mkdir(parents=True, exist_ok=True)
    chained = args.heads > 1
    out = args.dir / (f"mtp-heavy-{args.heads}heads.gguf" if chained else "mtp-heavy.gguf")
    spec = MtpSpec(
        seed=7,
        n_embd=576,
        n_head=9,
        n_head_kv=3,
        n_ff=1536,
        n_layer=args.layers,
        n_ctx=8192,
        logit_scale=0.15,
        head_noise=args.noise,
        f16=True,
        arch="mimo2" if chained else "glm4moe",
        heads=args.heads,
        claimed_heads=args.heads,
    )
    write_mtp_model(out, spec, smollm2_vocabulary(source), name="mtp-heavy")
    print(
        f"wrote {out} ({out.stat().st_size / 1e6:.0f} MB): {args.layers} main blocks, {args.heads} "
        f"head(s), tokenizer of {source.name}"
    )
    if args.check:
        check(out, args.check)


if __name__ == "__main__":
    main()
