"""Cost profiles by name, for `bench --cost-profile`: `cpu` (recorded on the project's 2-core CPU
testbed: heavy target, Q4_1 draft), `gpu[:R]` (a GPU's shape, draft passes R times cheaper),
`drift[:BASE]` (BASE's costs swinging by +-30%), or a FILE.json written by `bench --record-costs`."""

from __future__ import annotations

import json
import statistics
from bisect import bisect_left
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from localspec.engine.clock import CostProfile, DriftProfile, GpuProfile
from localspec.errors import LocalspecError
from localspec.text_input import exists

FORMAT = "localspec-costs/1"


@dataclass(frozen=True)
class RecordedProfile:
    """Replays recorded costs: a target pass costs the median of the passes of its width (widths
    between and beyond those recorded are interpolated linearly), a draft call the least-squares
    line through its calls by number of passes."""

    name: str
    verify_table: dict[int, float]
    draft_lines: dict[str, tuple[float, float]]  # source -> (seconds per call, seconds per pass)

    @staticmethod
    def from_record(name: str, record: dict) -> RecordedProfile:
        widths: dict[int, list[float]] = {}
        for batch, _context, seconds in record["verify"]:
            widths.setdefault(int(batch), []).append(float(seconds))
        if not widths:
            raise ValueError("no verification recorded")
        lines = {}
        for source, calls in record.get("draft", {}).items():
            xs, ys = [float(c[0]) for c in calls], [float(c[1]) for c in calls]
            mx, my = statistics.fmean(xs), statistics.fmean(ys)
            var = statistics.fmean((x - mx) ** 2 for x in xs)
            slope = (
                max(statistics.fmean((x - mx) * (y - my) for x, y in zip(xs, ys, strict=False)) / var, 0.0)
                if var > 0
                else 0.0
            )
            lines[source] = (max(my - slope * mx, 0.0), slope) if var > 0 else (my, 0.0)
        return RecordedProfile(name, {b: statistics.median(v) for b, v in widths.items()}, lines)

    def verify(self, batch: int, context: int, at: float) -> float:
        sizes = sorted(self.verify_table)
        t = self.verify_table
        if batch in t:
            return t[batch]
        if len(sizes) == 1 or batch < sizes[0]:
            return t[sizes[0]]
        if batch > sizes[-1]:
            lo, hi = sizes[-2], sizes[-1]
            return t[hi] + max((t[hi] - t[lo]) / (hi - lo), 0.0) * (batch - hi)
        i = bisect_left(sizes, batch)
        lo, hi = sizes[i - 1], sizes[i]
        return t[lo] + (t[hi] - t[lo]) * (batch - lo) / (hi - lo)

    def draft(self, source: str, passes: int, at: float) -> float:
        line = self.draft_lines.get(source)
        if line is None:
            # A tree's or chain's draft model runs the passes a plain draft model's does; a drafter
            # that runs none (prompt lookup) costs next to nothing.
            line = self.draft_lines.get("draft-model", (0.0, 0.0)) if passes else (0.0, 0.0)
        return line[0] + line[1] * passes


def read_profile(path: Path) -> RecordedProfile:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        return RecordedProfile.from_record(path.name, record)
    except FileNotFoundError:
        raise LocalspecError(f"cost profile {path}: no such file") from None
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as e:
        raise LocalspecError(f"cost profile {path} is not one `bench --record-costs` wrote ({e})") from None


def load_profile(spec: str) -> CostProfile:
    """A profile by name (cpu, gpu, gpu:R, drift, drift:BASE) or from a recorded FILE.json."""
    name, _, arg = spec.partition(":")
    if name == "cpu" and not arg:
        record = json.loads(
            resources.files("localspec.bench").joinpath("cost_profile_cpu.json").read_text(encoding="utf-8")
        )
        return RecordedProfile.from_record("cpu", record)
    if name == "gpu":
        try:
            ratio = float(arg) if arg else GpuProfile().ratio
        except ValueError:
            ratio = 0.0
        if not ratio > 1.0:
            raise LocalspecError(f"cost profile {spec!r}: gpu:R needs a draft cost ratio R > 1 (e.g. gpu:6)")
        return GpuProfile(ratio)
    if name == "drift":
        return DriftProfile(load_profile(arg or "cpu"))
    if spec.endswith(".json") or exists(Path(spec), "cost profile"):
        return read_profile(Path(spec).expanduser())
    raise LocalspecError(
        f"unknown cost profile {spec!r}: use cpu, gpu[:R], drift[:PROFILE] or a FILE.json from --record-costs"
    )
