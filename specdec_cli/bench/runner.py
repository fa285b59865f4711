"""Measuring speculation on against off: every prompt, every setting, alternating, in one process.

For each prompt and repeat, the target alone runs first and then each draft setting, so
slow drift of a noisy machine touches all of them alike; speedups are ratios taken within
one (prompt, repeat) group. A short warm-up comes before anything is timed. Greedy outputs
are compared with the target alone's; where one differs, an extra untimed traced run of
the target alone measures the logit margin at the first divergence.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace

from ..engine.decode.engine import Engine, GenOptions
from ..engine.stats import GenerationStats
from ..engine.verify.divergence import first_divergence
from ..engine.verify.verifiers import SamplingParams
from ..terminal.prompts import PromptItem


@dataclass(frozen=True)
class Config:
    """One setting to measure: the target alone, n-gram lookup, or the draft model with a
    draft length, a p-min and (at temperature > 0) a verification rule."""

    use_draft: bool
    draft_max: int = 0
    p_min: float = 0.0
    method: str = "draft"  # draft | eagle3 | dflash | dspark | ngram | auto (when use_draft)
    verify: str = "auto"

    @property
    def label(self) -> str:
        if not self.use_draft:
            return "no draft"
        if self.method == "auto":
            return "auto"
        if self.method == "ngram":
            return f"ngram, draft-max {self.draft_max}"
        tail = "" if self.verify == "auto" else f", {self.verify}"
        head = "" if self.method == "draft" else f"{self.method}, "
        return f"{head}draft-max {self.draft_max}, p-min {self.p_min:g}{tail}"

    def to_dict(self) -> dict:
        return {"label": self.label, "use_draft": self.use_draft, "method": self.method if self.use_draft else None,
                "draft_max": self.draft_max, "p_min": self.p_min, "verify": self.verify}


BASELINE = Config(use_draft=False)


def grid(
    draft_max: list[int],
    p_min: list[float],
    *,
    verify: list[str] = ("auto",),
    ngram: bool = True,
    method: str | None = "draft",
    auto: bool = True,
) -> list[Config]:
    """The target alone, auto (``run``'s default), n-gram lookup at each draft length, then
    every setting of the loaded draft (``method``: a classic draft model, an eagle3/dflash/dspark
    head, or None when there is no draft)."""
    from ..engine.decode.engine import AUTO_DRAFT_MAX

    configs = [BASELINE]
    if auto:
        configs.append(Config(True, AUTO_DRAFT_MAX, 0.0, "auto"))
    if ngram:
        configs += [Config(True, n, 0.0, "ngram") for n in draft_max]
    if method is not None:
        configs += [Config(True, n, p, method, v) for n in draft_max for p in p_min for v in verify]
    return configs


@dataclass
class Sample:
    scenario: str
    prompt_id: str
    repeat: int
    config: Config
    n_prompt: int
    n_generated: int
    prompt_seconds: float
    first_token_seconds: float | None
    decode_tokens_per_second: float | None
    n_drafted: int
    n_accepted: int
    acceptance_rate: float | None
    tokens_per_pass: float | None
    overhead_fraction: float | None  # decode-loop time outside llama_decode, as a fraction
    peak_rss: int  # the process's peak resident memory so far, bytes
    n_target_passes: int = 0
    n_restores: int = 0  # checkpoints restored after a partial acceptance (recurrent/hybrid targets)
    n_substituted: int = 0  # of the accepted tokens, those an edit learned from the output wrote (auto)
    tokens: list[int] = field(repr=False, default_factory=list)
    divergence: dict | None = None  # vs the target alone, when the outputs differ

    def to_dict(self) -> dict:
        d = asdict(self)
        d["config"] = self.config.to_dict()
        return d


def peak_rss() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _configure(engine: Engine, cfg: Config) -> None:
    if cfg.use_draft:
        engine.set_draft(draft_max=cfg.draft_max, p_min=cfg.p_min)


def run_bench(
    engine: Engine,
    scenarios: dict[str, list[PromptItem]],
    configs: list[Config],
    *,
    repeats: int = 1,
    max_tokens: int = 128,
    render: Callable[[PromptItem], list[int]],
    on_sample: Callable[[Sample], None] | None = None,
    sampling: SamplingParams | None = None,
    grammar=None,
) -> list[Sample]:
    """Run every (scenario, prompt, repeat, config); ``render`` turns a prompt into tokens;
    ``grammar``: a compiled constraint every generation obeys (``--json-schema``...)."""
    gen = GenOptions(max_tokens=max_tokens, sampling=sampling or SamplingParams(temp=0.0), grammar=grammar)
    encoded = {(s, i): render(item) for s, items in scenarios.items() for i, item in enumerate(items)}
    first = next(iter(encoded.values()))
    engine.generate(first, GenOptions(max_tokens=8), use_draft=False)  # warm-up: caches, thread pools
    for cfg in {c.method: c for c in configs if c.use_draft}.values():
        _configure(engine, cfg)
        engine.generate(first, GenOptions(max_tokens=8), method=cfg.method)
    samples: list[Sample] = []
    for (scenario, i), tokens in encoded.items():
        item = scenarios[scenario][i]
        pid = str(item.id if item.id is not None else f"{scenario}-{i + 1}")
        for rep in range(repeats):
            baseline_tokens: list[int] | None = None
            for cfg in configs:
                _configure(engine, cfg)
                sample = _measure(engine, tokens, gen, cfg, scenario, pid, rep)
                if not cfg.use_draft:
                    baseline_tokens = sample.tokens
                elif gen.sampling.temp <= 0 and baseline_tokens is not None and sample.tokens != baseline_tokens:
                    sample.divergence = _divergence(engine, tokens, gen, sample.tokens)
                samples.append(sample)
                if on_sample:
                    on_sample(sample)
    return samples


def _measure(engine: Engine, tokens, gen, cfg: Config, scenario: str, pid: str, rep: int) -> Sample:
    busy_before = engine.busy_seconds()
    run_gen = replace(gen, verify=cfg.verify) if cfg.verify != gen.verify else gen
    res = engine.generate(tokens, run_gen, use_draft=cfg.use_draft, method=cfg.method if cfg.use_draft else None)
    s = res.stats
    busy = engine.busy_seconds() - busy_before
    outside = max(0.0, s.prompt_seconds + s.decode_seconds - busy)
    return Sample(
        scenario=scenario,
        prompt_id=pid,
        repeat=rep,
        config=cfg,
        **sample_stats(s),
        overhead_fraction=outside / (s.prompt_seconds + s.decode_seconds) if s.decode_seconds else None,
        peak_rss=peak_rss(),
        tokens=res.tokens,
    )


def sample_stats(stats: GenerationStats) -> dict:
    """The fields of a ``Sample`` that come from the stats schema (``GenerationStats.to_dict``),
    unrounded; bench calls the decode speed ``decode_tokens_per_second``."""
    d = stats.to_dict(rounded=False)
    d["decode_tokens_per_second"] = d.pop("tokens_per_second")
    return {f.name: d[f.name] for f in fields(Sample) if f.name in d}


def _divergence(engine: Engine, tokens, gen, spec_tokens) -> dict:
    traced = engine.generate(tokens, gen, use_draft=False, trace=True)
    div = first_divergence(traced.tokens, traced.trace, spec_tokens)
    if div is None:
        return {"identical_to_traced_rerun": True}
    return div.to_dict()
