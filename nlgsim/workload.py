"""Workloads: the requests a run replays, from the thesis's query types or from a trace file.

A request is an arrival time, a prompt length and one output length per choice. Two sources:

* the thesis's Table 4.2 query types at a Poisson rate (``thesis_requests``);
* a trace with a timestamp, input tokens and output tokens per row (``load_trace``), CSV such as the
  Azure LLM inference traces or BurstGPT (whose failed requests, logged with no output, are left out
  and counted), or JSON lines such as Mooncake's. A trace whose requests do not all fit the model's context is refused
  unless a ``LengthMap`` names how to fit them (clip, scale or drop); the trace then reports what the
  mapping changed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nlgsim.trace_rows import read_rows


@dataclass(frozen=True, slots=True)
class Request:
    id: int
    arrival: float
    """Seconds from the start of the run."""
    prompt_tokens: int
    output_tokens: tuple[int, ...]
    """Tokens each choice generates (the replay sets ``max_tokens`` and ``ignore_eos``)."""

    @property
    def choices(self) -> int:
        return len(self.output_tokens)


@dataclass(frozen=True)
class QueryType:
    """A row of the thesis's Table 4.2 (Cho, 2022), the one definition the simulator and the demo's
    load both draw from:

    =====================  ======  =======
    option                 simple  complex
    =====================  ======  =======
    tokens in prompt       34      82
    generated, mean        30      62
    generated, min / max   10/34   15/64
    choices (``n``)        1       4
    =====================  ======  =======
    """

    name: str
    prompt_tokens: int
    gen_mean: float
    gen_min: int
    gen_max: int
    choices: int

    @property
    def p_max(self) -> float:
        """Probability that a choice runs to ``gen_max`` (max_tokens); otherwise it stops early.

        The table gives min, mean and max only. We model a choice as reaching max_tokens with
        probability p and otherwise stopping at a uniform length in [min, max] (an EOS), and solve
        p from the mean: p = (mean - (min+max)/2) / (max - (min+max)/2).
        """
        mid = (self.gen_min + self.gen_max) / 2
        return 1.0 if self.gen_max == self.gen_min else (self.gen_mean - mid) / (self.gen_max - mid)

    def mean_tokens(self) -> float:
        return self.gen_mean * self.choices

    def draw_max_tokens(self, rng: random.Random) -> int:
        """One length for all of a request's choices, drawn by the same rule as a choice's.

        What a live client asks for: a request has one ``max_tokens``, and with ``ignore_eos`` every
        choice generates exactly that many (a model with random weights never stops on its own).
        The simulator draws each choice alone, as choices that end at an EOS would.
        """
        return self.gen_max if rng.random() < self.p_max else rng.randint(self.gen_min, self.gen_max)


SIMPLE = QueryType("simple", prompt_tokens=34, gen_mean=30, gen_min=10, gen_max=34, choices=1)
COMPLEX = QueryType("complex", prompt_tokens=82, gen_mean=62, gen_min=15, gen_max=64, choices=4)
QUERY_TYPES = {q.name: q for q in (SIMPLE, COMPLEX)}


def thesis_requests(
    query: QueryType, rate: float, count: int, seed: int, ramp_s: float = 0.0
) -> list[Request]:
    """``count`` requests of one query type arriving as a Poisson process of ``rate`` per second.

    With ``ramp_s`` > 0 the rate rises linearly from 0 to ``rate`` over the first ``ramp_s`` seconds
    (a non-homogeneous Poisson process: unit-rate arrivals mapped through the inverse of the
    cumulative rate), then stays at ``rate``.
    """
    if rate <= 0 or count < 0 or ramp_s < 0:
        raise ValueError(f"rate = {rate} must be > 0, count = {count} >= 0 and ramp_s = {ramp_s} >= 0")
    rng = np.random.default_rng(seed)
    unit = np.cumsum(rng.exponential(1.0, size=count))
    if ramp_s > 0:
        # Cumulative rate: rate t^2 / (2 ramp) before the ramp ends, then rate (t - ramp / 2).
        knee = rate * ramp_s / 2
        arrivals = np.where(unit < knee, np.sqrt(2 * ramp_s * unit / rate), unit / rate + ramp_s / 2)
    else:
        arrivals = unit / rate
    early = rng.integers(query.gen_min, query.gen_max + 1, size=(count, query.choices))
    to_max = rng.random(size=(count, query.choices)) < query.p_max
    lengths = np.where(to_max, query.gen_max, early)
    return [
        Request(i, float(arrivals[i]), query.prompt_tokens, tuple(int(x) for x in lengths[i]))
        for i in range(count)
    ]


LENGTH_STRATEGIES = {
    "refuse": "the default: a trace with any request that does not fit the context is refused",
    "clip": "a request that does not fit keeps its output and loses the end of its prompt",
    "scale:F": "every prompt is multiplied by F (0 < F <= 1, rounded, at least 1 token); those still "
    "too long are clipped",
    "drop": "a request that does not fit is left out",
}
"""``--map-lengths`` values and what each does (docs/simulator.md lists the same, tied by a test)."""


@dataclass(frozen=True)
class LengthMap:
    """How trace lengths become lengths the model serves: one of ``LENGTH_STRATEGIES``.

    A request fits when prompt + output <= ``max_context``. An output longer than the context allows
    (``max_context - 1``, or ``max_output`` when set) is capped by ``clip`` and ``scale``, which then
    clip the prompt to what is left.
    """

    mode: str = "refuse"
    factor: float = 1.0
    max_context: int = 1024
    max_output: int | None = None
    """Outputs capped at this many tokens in every strategy (a shorter replay), when set."""

    @classmethod
    def parse(cls, text: str, max_context: int = 1024) -> LengthMap:
        """``refuse``, ``clip``, ``drop`` or ``scale:F``."""
        mode, sep, arg = text.partition(":")
        if mode in ("refuse", "clip", "drop") and not sep:
            return cls(mode, 1.0, max_context)
        if mode == "scale" and arg:
            try:
                factor = float(arg)
            except ValueError:
                factor = math.nan
            if not 0 < factor <= 1:
                raise ValueError(f"--map-lengths scale:{arg}: F must be a number in (0, 1], e.g. scale:0.125")
            return cls("scale", factor, max_context)
        raise ValueError(
            f"--map-lengths = {text!r}: use one of {', '.join(LENGTH_STRATEGIES)} (e.g. scale:0.125)"
        )

    def apply(self, prompt: int, output: int) -> tuple[int, int] | None:
        """The lengths served, or None for a request that does not fit and is refused or dropped."""
        out = min(output, self.max_output) if self.max_output is not None else output
        p = max(1, round(prompt * self.factor)) if self.mode == "scale" else prompt
        if p + out <= self.max_context:
            return p, out
        if self.mode in ("refuse", "drop"):
            return None
        out = min(out, self.max_context - 1)
        return min(p, self.max_context - out), out

    def describe(self) -> str:
        cap = f", outputs capped at {self.max_output}" if self.max_output is not None else ""
        return f"--map-lengths {self.text} ({LENGTH_STRATEGIES[self.key]}; context {self.max_context}{cap})"

    @property
    def key(self) -> str:
        return "scale:F" if self.mode == "scale" else self.mode

    @property
    def text(self) -> str:
        return f"scale:{self.factor:g}" if self.mode == "scale" else self.mode


@dataclass(frozen=True)
class MappingCounts:
    """What a ``LengthMap`` did to the requests of a trace window."""

    read: int = 0
    scaled: int = 0
    """Prompts multiplied by the ``scale`` factor."""
    prompts_clipped: int = 0
    """Prompts cut (after scaling) to fit beside their output."""
    outputs_capped: int = 0
    dropped: int = 0
    no_output: int = 0
    """Rows with no output or no prompt tokens, left out: a request that failed (BurstGPT logs its
    failures with 0 response tokens) put no decoding load on a replica to replay."""

    def describe(self) -> str:
        return (
            f"{self.read} requests read: {self.scaled} prompts scaled, {self.prompts_clipped} prompts clipped, "
            f"{self.outputs_capped} outputs capped, {self.dropped} dropped"
            + (f", {self.no_output} rows without output or prompt tokens left out" if self.no_output else "")
        )


@dataclass(frozen=True)
class Trace:
    name: str
    requests: list[Request]
    mapping: str
    changes: MappingCounts

    @property
    def duration(self) -> float:
        return self.requests[-1].arrival if self.requests else 0.0


#: Seconds over which the copies of one request are spread when a trace is scaled (FleetScale): a
#: few seconds, far below a pod's start-up (tens of seconds) and the SLO interval (30 s), so the rate
#: seen by anything that reacts (a window, a round, a pod starting) is the trace's times K, burst
#: for burst; and long against one engine step, so the copies do not land in the same step as a
#: block of K identical prompts, which no traffic does.
SCALE_JITTER_S = 2.0


@dataclass(frozen=True)
class DayCurve:
    """A trace replayed for ``length_s`` seconds, looped, at a rate that follows a daily curve: ``low``
    times the trace's at the start (night), rising smoothly to ``high`` times at half the length (noon),
    back to ``low`` at the end; a cosine, the smooth curve with one trough and one peak a day.

    ``length_s`` below a day's 86,400 s compresses the curve, not the trace: the trace keeps its own
    seconds (its bursts and lulls), only the slow swing of its rate passes faster, so a simulated day
    costs hours of replay instead of 24.
    """

    low: float
    high: float
    length_s: float = 86_400.0

    def __post_init__(self) -> None:
        ok = all(math.isfinite(v) for v in (self.low, self.high, self.length_s))
        if not (ok and 0 < self.low <= self.high and self.length_s > 0):
            raise ValueError(
                f"--day {self.low:g}:{self.high:g} over --day-length {self.length_s:g}: want 0 < LOW <= HIGH "
                "(times the trace's rate) and a length > 0 s"
            )

    def factor(self, t: float) -> float:
        """The rate's multiple at ``t`` s into the day."""
        return self.low + (self.high - self.low) * (1 - math.cos(2 * math.pi * t / self.length_s)) / 2

    def looped(self, requests: Sequence[Request]) -> list[Request]:
        """``requests`` repeated back to back until ``length_s``, each pass one trace span later."""
        if not requests:
            return []
        period = math.ceil(requests[-1].arrival + 1e-9)
        out: list[Request] = []
        for k in range(math.ceil(self.length_s / period)):
            for r in requests:
                t = r.arrival + k * period
                if t < self.length_s:
                    out.append(Request(len(out), t, r.prompt_tokens, r.output_tokens))
        return out

    def describe(self) -> str:
        hours = self.length_s / 3600
        return (
            f"looped over a day of {hours:g} h at x{self.low:g} (night) to x{self.high:g} (noon) its rate, "
            "a cosine"
        )


@dataclass(frozen=True)
class FleetScale:
    """A trace at ``factor`` times its rate with its shape and bursts kept: every request is replicated
    ``factor`` times, each copy arriving ``U(0, jitter_s)`` seconds after the original (uniform, drawn
    from ``random.Random(seed)`` in trace order), lengths unchanged. With a ``day``
    (:class:`DayCurve`), the trace is looped over the day and each request is replicated the day's
    factor at its arrival: its whole part, and one copy more with the fractional part's probability.

    Why this way: a copy per request keeps each second's demand at K times the trace's, so a burst
    stays a burst of the same length and the gaps stay gaps. Superposing K copies shifted by random
    offsets would average the swings away (the sum of K shifted bursts is flat), and sampling arrivals
    from the per-second rate times K adds Poisson noise the trace does not have and needs a rule for
    lengths. ``factor`` 1 is the trace as it is.
    """

    factor: int = 1
    jitter_s: float = SCALE_JITTER_S
    seed: int = 0
    day: DayCurve | None = None

    def __post_init__(self) -> None:
        errors = []
        if isinstance(self.factor, bool) or not isinstance(self.factor, int) or self.factor < 1:
            errors.append(f"--scale {self.factor!r}: must be a whole number >= 1 (the trace's rate times it)")
        if not (math.isfinite(self.jitter_s) and self.jitter_s >= 0):
            errors.append(f"--scale-jitter {self.jitter_s!r}: must be a finite number of seconds >= 0")
        if self.day is not None and self.factor != 1:
            errors.append(f"--scale {self.factor} with --day: the day's curve sets the rate; give one of them")
        if errors:
            raise ValueError("; ".join(errors))

    def apply(self, requests: Sequence[Request]) -> list[Request]:
        """The scaled requests, by arrival (ties in trace order), numbered from 0."""
        if self.factor == 1 and self.day is None:
            return list(requests)
        rng = random.Random(self.seed)
        day = self.day
        source = day.looped(requests) if day else requests
        copies = []
        for r in source:
            if day is None:
                k = self.factor
            else:
                m = day.factor(r.arrival)
                k = int(m) + (rng.random() < m - int(m))
            copies += [(r.arrival + rng.uniform(0.0, self.jitter_s), r.id, j, r) for j in range(k)]
        copies.sort(key=lambda c: (c[0], c[1], c[2]))
        return [Request(i, t, r.prompt_tokens, r.output_tokens) for i, (t, _, _, r) in enumerate(copies)]

    def describe(self) -> str:
        jitter = f"each copy {self.jitter_s:g} s of uniform jitter later at most (seed {self.seed})"
        if self.day is not None:
            return f"{self.day.describe()}: {jitter}"
        if self.factor == 1:
            return "at its recorded rate"
        return f"scaled x{self.factor}: each request replicated {self.factor} times, {jitter}"

    @property
    def label(self) -> str:
        """What a workload's name says of the scaling: `` x10``, `` day x3-x30``, or nothing."""
        if self.day is not None:
            return f" day x{self.day.low:g}-x{self.day.high:g}"
        return f" x{self.factor}" if self.factor != 1 else ""


def grouped(requests: Sequence[Request], every_s: float) -> list[Request]:
    """Arrivals gathered into groups at one instant every ``every_s`` seconds: each request moved back to
    the start of its slot (as a client that batches its users' requests, or a gateway that flushes on a
    timer, sends them); order and lengths kept. ``every_s`` 0 leaves them as they are."""
    if every_s <= 0:
        return list(requests)
    return [
        Request(r.id, math.floor(r.arrival / every_s) * every_s, r.prompt_tokens, r.output_tokens) for r in requests
    ]


def load_trace(
    path: str | Path,
    lengths: LengthMap | None = None,
    *,
    start: float = 0.0,
    duration: float | None = None,
    speed: float = 1.0,
    time_unit: str = "s",
) -> Trace:
    """Read a trace (CSV or JSON lines, :mod:`nlgsim.trace_rows`); keep rows in ``[start, start + duration)``
    seconds after its first row.

    Numeric timestamps count ``time_unit`` (``s``, ``ms`` or ``us``), or are ISO dates; rows may come in
    any order. ``speed`` divides inter-arrival times (2.0 replays the trace twice as fast). Lengths go
    through ``lengths``.
    """
    path = Path(path)
    lengths = lengths or LengthMap()
    rows = read_rows(path, time_unit)
    if speed <= 0 or not math.isfinite(speed):
        raise ValueError(f"speed = {speed}, must be a finite number > 0")
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0] if rows else 0.0
    window = [(t - t0 - start, p, o) for t, p, o in rows]
    window = [w for w in window if w[0] >= 0 and (duration is None or w[0] < duration)]
    empty = sum(1 for _, p, o in window if p < 1 or o < 1)
    window = [w for w in window if w[1] >= 1 and w[2] >= 1]
    requests: list[Request] = []
    scaled = clipped = capped = dropped = 0
    for rel, prompt, output in window:
        served = lengths.apply(prompt, output)
        if served is None:
            dropped += 1
            continue
        p, o = served
        wanted = max(1, round(prompt * lengths.factor)) if lengths.mode == "scale" else prompt
        scaled += wanted != prompt
        clipped += p < wanted
        capped += o < output
        requests.append(Request(len(requests), rel / speed, p, (o,)))
    if lengths.mode == "refuse" and dropped:
        longest = max(p + o for _, p, o in window)
        raise ValueError(
            f"{path.name}: {dropped} of {len(window)} requests do not fit the model's {lengths.max_context}-token "
            f"context (prompt + output tokens, up to {longest}); choose how to fit them with --map-lengths "
            "clip, scale:F or drop (docs/simulator.md, 'Fitting lengths into the context')"
        )
    counts = MappingCounts(len(window) + empty, scaled, clipped, capped, dropped, empty)
    return Trace(path.stem, requests, lengths.describe(), counts)
