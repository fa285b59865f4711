"""Many prompts at once: continuous batching over one target context, with drafts decided per pass.

The target context holds one sequence per slot in a unified KV cache (one pool of cells that
every sequence draws from). Each step is one target pass that carries, for every slot that is
decoding, its last token and its draft (possibly none), and fills the rest of the batch with
prefill chunks of the slots still reading their prompts. A slot whose job ends takes the next
waiting prompt at once, so decoding never stalls behind a long prefill, and a prompt that
begins like one already in the cache (the same system prompt or instructions) shares those
cells instead of computing them again (``seq_cp``, or the slot's own cells kept in place).

Which sequences draft, and how far, is decided for the whole pass (``policy.plan_pass``): each
sequence's last token is certain, each draft token adds its expected kept tokens, and the pass
costs the measured time of its total size plus the draft steps. With one sequence this is the
single-sequence rule; a draft that does not pay at this batch size is not made.

Each sequence is verified on its own rows with its own verifier and sampler (its own RNG), and
a rejected draft is taken back from that sequence alone (``seq_rm``), so a sequence's output
never depends on its neighbours: the same tokens as alone, up to llama.cpp's batch-shape
numerics (``shared/notes/batch-numerics.md`` in the project's notes says how small they are).

Only what keeps a per-sequence memory that can drop positions runs here: attention targets,
with the suffix index, n-gram lookup and the draft model (``drafters/model_batch.py``). Heads,
MTP and recurrent or hybrid targets run one sequence at a time (``session.py``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..terminal.textstream import TextStream
from .drafters.auto import AutoDrafter
from .drafters.model_batch import Ask, BatchModelDrafter
from .drafters.ngram import NgramDrafter
from .drafters.suffix import OutputPool, SuffixIndex
from .errors import ContextFull
from .policy import best_length, confidence_bucket, plan_pass
from .result import Result
from .session import Session
from .stats import GenerationStats
from .verify import Proposal, Sampler, make_verifier, resolve_verify

_NONE = Proposal([])
MODEL_STOP = 0.2  # a model draft stops before a token whose calibrated acceptance is below this
SHARE_MIN = 16  # a prompt waits for another's prefill when that shares at least this many more tokens


@dataclass
class Job:
    """One prompt of a run: its place in the input, its tokens and its own sampling seed."""

    index: int
    prompt: list[int]
    seed: int | None = None


@dataclass
class RunStats:
    """What a whole run of many prompts did: the figures of its stderr summary."""

    n_jobs: int = 0
    n_passes: int = 0
    n_generated: int = 0
    seconds: float = 0.0  # wall time of the run, from the first pass to the last
    seq_passes: int = 0  # sum over passes of the sequences decoding in them
    n_parallel: int = 0
    by_drafter: dict[str, int] = field(default_factory=dict)  # sequence-passes per proposer

    @property
    def tokens_per_second(self) -> float | None:
        return self.n_generated / self.seconds if self.seconds > 0 else None

    @property
    def mean_sequences(self) -> float | None:
        return self.seq_passes / self.n_passes if self.n_passes else None

    def summary(self, method: str | None) -> str:
        parts = [f"generated {self.n_generated} tok",
                 f"{self.tokens_per_second or 0:.2f} tok/s", f"{self.n_parallel} at once",
                 f"{self.mean_sequences or 0:.2f} seq/pass"]
        total = sum(self.by_drafter.values())
        if method and total:
            order = sorted(self.by_drafter.items(), key=lambda kv: (kv[0] == "none", -kv[1]))
            parts.append(f"{method}: " + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in order))
        return " | ".join(parts)

    def to_dict(self) -> dict:
        return {"n_jobs": self.n_jobs, "n_generated": self.n_generated, "seconds": round(self.seconds, 6),
                "tokens_per_second": self.tokens_per_second, "n_passes": self.n_passes,
                "mean_sequences_per_pass": self.mean_sequences, "n_parallel": self.n_parallel,
                "steps_by_drafter": dict(self.by_drafter)}


class _Slot:
    """One sequence of the target context and the job it is running (or last ran)."""

    def __init__(self, seq: int):
        self.seq = seq
        self.job: Job | None = None
        self.tokens: list[int] = []  # prompt + output; the cells hold tokens[:n_cached]
        self.n_cached = 0
        self.n_prompt = 0
        self.wait: tuple[_Slot, int] | None = None  # (slot, n): share its first n cells once computed

    @property
    def decoding(self) -> bool:
        return self.n_cached == len(self.tokens) - 1


class Scheduler:
    """Runs jobs ``n_parallel`` at a time on an engine loaded with at least that many sequences."""

    def __init__(self, engine, gen, *, n_parallel: int, method: str | None):
        self.engine = engine
        self.gen = gen
        self.ctx = engine.target_ctx
        self.n_parallel = max(1, min(n_parallel, self.ctx.params.n_seq_max))
        self.method = method
        self.ctx_seq = engine.n_ctx_seq  # one sequence's context: --ctx
        self.draft_max = engine.draft_options.draft_max
        self.is_eog = engine.target_model.is_eog
        self.piece = engine.target_model.piece
        self.auto: AutoDrafter | None = engine.drafters.get("auto") if method == "auto" else None
        self.model: BatchModelDrafter | None = engine.batch_model if method in ("auto", "draft") else None
        if self.auto is not None:
            engine.ensure_costs()
            if self.model is not None and not self.auto.model_can_pay(self.draft_max):
                self.model = None  # the draft model cannot pay on this machine: never asked
        self.costs = engine.costs if engine._costs_ready else None
        self.pool = OutputPool()
        self.stats = RunStats(n_parallel=self.n_parallel)
        sampled = self.model is not None
        self.rule = resolve_verify(gen.verify, gen.sampling.temp, sampled_drafts=sampled)

    # --- the run ---------------------------------------------------------------------------
    def run(self, jobs: list[Job]) -> Iterator[tuple[Job, object]]:
        """Yield (job, Result) as each job finishes (not in input order)."""
        ctx = self.ctx
        ctx.kv_clear()
        if self.model is not None:
            self.model.reset()
        for d in self.engine.drafters.values():
            d.set_active(d is self.auto)
        self.slots = [_Slot(i) for i in range(self.n_parallel)]
        self.waiting = deque(jobs)
        self.stats.n_jobs = len(jobs)
        t0 = time.perf_counter()
        try:
            while self.waiting or any(s.job is not None for s in self.slots):
                yield from self._step()
        finally:
            self.stats.seconds = time.perf_counter() - t0

    def _step(self) -> Iterator[tuple[Job, object]]:
        self._share_ready()
        self._admit()
        dec = [s for s in self.slots if s.job is not None and s.decoding]
        pre = [s for s in self.slots if s.job is not None and not s.decoding and s.wait is None]
        for s in dec:
            if self.ctx_seq - len(s.tokens) < 0:
                yield self._finish(s, "context")
        dec = [s for s in dec if s.job is not None]
        pending = sum(len(s.tokens) - 1 - s.n_cached for s in pre)
        t_draft = time.perf_counter()
        props, sources = self._draft(dec, pending)
        t_draft = time.perf_counter() - t_draft
        # the batch: each decoding sequence's [last token, draft...], then prefill chunks
        toks: list[int] = []
        pos: list[int] = []
        seqs: list[int] = []
        outs: list[bool] = []
        base: dict[int, int] = {}
        for s, prop in zip(dec, props):
            base[s.seq] = len(toks)
            for i, t in enumerate([s.tokens[-1], *prop.tokens]):
                toks.append(t)
                pos.append(s.n_cached + i)
                seqs.append(s.seq)
                outs.append(True)
        room = self.ctx.n_batch - len(toks)
        chunks: list[tuple[_Slot, int]] = []
        for s in pre:
            take = min(room, len(s.tokens) - 1 - s.n_cached)
            if take <= 0:
                break
            toks.extend(s.tokens[s.n_cached : s.n_cached + take])
            pos.extend(range(s.n_cached, s.n_cached + take))
            seqs.extend([s.seq] * take)
            outs.extend([False] * take)
            chunks.append((s, take))
            room -= take
        if not toks:  # every decoding sequence just ran out of context
            return
        t = time.perf_counter()
        try:
            self.ctx.decode_many(toks, pos, seqs, outs)
        except ContextFull:
            # the cells ran out (sized for n_parallel whole contexts, this means a bug or --force)
            for s in dec + pre:
                yield self._finish(s, "context")
            return
        dt = time.perf_counter() - t
        if self.costs is not None:
            self.costs.observe_pass(len(toks), dt)
        st = self.stats
        st.n_passes += 1
        st.seq_passes += len(dec)
        for s, take in chunks:
            s.n_cached += take
            if s.decoding:
                s.stats.prompt_seconds = time.perf_counter() - s.t_admit
        share = t_draft / max(1, len(dec))
        for s, prop, source in zip(dec, props, sources):
            done = self._verify(s, prop, source, base[s.seq], dt, share)
            if done is not None:
                yield done

    # --- admission and prefix sharing --------------------------------------------------------
    def _admit(self) -> None:
        for slot in self.slots:
            if slot.job is not None or not self.waiting:
                continue
            job = self.waiting.popleft()
            prompt = job.prompt
            limit = len(prompt) - 1  # the last prompt token is always evaluated by the first decode pass
            # the longest prefix some sequence's cells already hold
            best, src = 0, None
            for other in self.slots:
                n = _common(other.tokens[: other.n_cached], prompt, limit)
                if n > best or (n == best and other is slot):
                    best, src = n, other
            if src is slot:
                self.ctx.seq_rm(slot.seq, best, -1)
            else:
                self.ctx.seq_rm(slot.seq, -1, -1)
                if src is not None and best > 0:
                    self.ctx.seq_cp(src.seq, slot.seq, 0, best)
            self._start(slot, job, best)
            # a longer prefix another prompt is still reading: wait for its cells rather than compute them twice
            for other in self.slots:
                if other is slot or other.job is None or other.decoding:
                    continue
                n = _common(other.tokens[: other.n_prompt], prompt, limit)
                if n >= best + SHARE_MIN and (slot.wait is None or n > slot.wait[1]):
                    slot.wait = (other, n)

    def _share_ready(self) -> None:
        """Waiting slots take the shared cells their source has computed by now."""
        for slot in self.slots:
            if slot.wait is None:
                continue
            src, n = slot.wait
            if src.job is None or src.n_cached >= n:
                if _common(src.tokens[: src.n_cached], slot.tokens, n) == n:
                    self.ctx.seq_rm(slot.seq, -1, -1)
                    self.ctx.seq_cp(src.seq, slot.seq, 0, n)
                    slot.stats.n_prompt_reused = slot.n_cached = n
                    if slot.decoding:
                        slot.stats.prompt_seconds = time.perf_counter() - slot.t_admit
                slot.wait = None

    def _start(self, slot: _Slot, job: Job, reused: int) -> None:
        from .verify import SamplingParams

        slot.job = job
        slot.wait = None
        slot.tokens = list(job.prompt)
        slot.n_prompt = len(job.prompt)
        slot.n_cached = reused
        slot.t_admit = time.perf_counter()
        slot.t_decode = None
        slot.output = []
        slot.stream = TextStream(self.piece, self.gen.stop)
        sp = self.gen.sampling
        slot.sampler = Sampler(SamplingParams(temp=sp.temp, top_k=sp.top_k, top_p=sp.top_p, seed=job.seed)) \
            if self.rule != "greedy" else None
        slot.verifier = make_verifier(self.rule, slot.sampler)
        slot.stats = GenerationStats(method=self.method, rollback="partial")
        slot.stats.n_prompt = len(job.prompt)
        slot.stats.n_prompt_reused = reused
        if slot.decoding:
            slot.stats.prompt_seconds = 0.0
        slot.index = SuffixIndex(self.pool) if self.auto is not None else None
        if slot.index is not None:
            slot.index.begin(job.prompt)
        slot.ngram = NgramDrafter() if self.method == "ngram" else None
        if slot.ngram is not None:
            slot.ngram.begin(job.prompt)
        slot.pending = ("none", [], [])

    # --- drafting ----------------------------------------------------------------------------
    def _cap(self, s: _Slot) -> int:
        left = self.gen.max_tokens - len(s.output) - 1
        return max(0, min(self.draft_max, left, self.ctx_seq - len(s.tokens)))

    def _draft(self, dec: list[_Slot], pending_prefill: int) -> tuple[list[Proposal], list[str]]:
        if not dec or self.method is None:
            return [_NONE] * len(dec), ["none"] * len(dec)
        caps = [self._cap(s) for s in dec]
        # never more outputs or tokens than the context takes in one pass
        limit = min(self.ctx.params.n_outputs_max, self.ctx.n_batch) - len(dec)
        while sum(caps) > limit:
            i = caps.index(max(caps))
            caps[i] -= 1
        if self.method == "ngram":
            props = [Proposal(s.ngram.draft(s.tokens, c)) if c else _NONE for s, c in zip(dec, caps)]
            return props, ["ngram" if p.tokens else "none" for p in props]
        if self.method == "draft":
            asks = [Ask(s.seq, s.tokens, c, s.sampler) for s, c in zip(dec, caps)]
            p_min = self.engine.draft_options.p_min
            self.model.propose(asks, stop=lambda _seq, _d, conf: conf < p_min)
            props = [a.proposal() for a in asks]
            return props, ["draft" if p.tokens else "none" for p in props]
        return self._draft_auto(dec, caps, pending_prefill)

    def _draft_auto(self, dec: list[_Slot], caps: list[int], pending_prefill: int):
        """Auto over the pass: each sequence offers its best proposer's candidates (the suffix index,
        or the draft model where its expected rate is higher), and ``plan_pass`` cuts them."""
        auto, costs = self.auto, self.engine.costs
        n_prefill = max(0, min(pending_prefill, self.ctx.n_batch - len(dec) - sum(caps)))
        ngram_cost, model_cost = costs.draft_seconds("ngram"), costs.draft_seconds(auto.name)
        options = []  # per sequence: (n-gram candidates, or None for the model; acceptances; cost per token)
        for s, cap in zip(dec, caps):
            if not cap:
                options.append((None, [], 0.0))
                continue
            t0 = time.perf_counter()
            c = auto.ngram_candidates(s.index, s.tokens, cap)
            costs.observe_draft("ngram", max(1, len(c.tokens)), time.perf_counter() - t0)
            option = (c, c.accept, ngram_cost)
            if self.model is not None:
                acc = [auto.model_position(i) for i in range(cap)]
                if best_length(acc, costs, model_cost).rate > best_length(c.accept, costs, ngram_cost).rate:
                    option = (None, acc, model_cost)
            options.append(option)
        plan = plan_pass([o[1] for o in options], costs, n_prefill=n_prefill,
                         draft_costs=[o[2] for o in options])
        props: list[Proposal] = []
        sources: list[str] = []
        asks: list[tuple[int, Ask]] = []
        for i, (s, (c, _acc, _cost), k) in enumerate(zip(dec, options, plan.lengths)):
            props.append(_NONE)
            sources.append("none")
            s.pending = ("none", [], [])
            if k and c is not None:
                props[i], sources[i] = Proposal(c.tokens[:k]), "ngram"
                s.pending = ("ngram", c.buckets[:k], c.priors[:k])
            elif k:
                asks.append((i, Ask(s.seq, s.tokens, k, s.sampler)))
        if asks:
            self._draft_with_model(dec, asks, props, sources)
        return props, sources

    def _draft_with_model(self, dec: list[_Slot], asks: list[tuple[int, Ask]], props: list[Proposal],
                          sources: list[str]) -> None:
        """The planned model drafts, in one pass per step; a sequence stops early where the
        draft's calibrated confidence says its next token is unlikely to be kept."""
        auto, costs = self.auto, self.engine.costs
        cal = auto._model_conf

        def stop(_seq: int, depth: int, conf: float) -> bool:
            return depth > 0 and cal.estimate((confidence_bucket(conf),), conf) < MODEL_STOP

        t0 = time.perf_counter()
        self.model.propose([a for _, a in asks], stop=stop)
        costs.observe_draft(auto.name, sum(len(a.tokens) + 1 for _, a in asks), time.perf_counter() - t0)
        for i, a in asks:
            if a.tokens:
                props[i], sources[i] = a.proposal(), auto.name
                dec[i].pending = (auto.name, [(confidence_bucket(x),) for x in a.confidences], list(a.confidences))

    # --- verification and the end of a job ----------------------------------------------------
    def _verify(self, s: _Slot, prop: Proposal, source: str, base: int, dt: float, draft_share: float):
        st = s.stats
        if s.t_decode is None:
            s.t_decode = time.perf_counter() - dt
        ctx = self.ctx
        accepted = s.verifier.verify(lambda i: ctx.logits(base + i), prop)
        n_kept = len(accepted) - 1
        draft = prop.tokens
        if n_kept < len(draft):
            ctx.seq_rm(s.seq, s.n_cached + 1 + n_kept, -1)
        s.n_cached += 1 + n_kept
        if self.auto is not None:
            self.auto.learn(*s.pending, n_kept)
            s.pending = ("none", [], [])
        st.n_target_passes += 1
        st.target_seconds += dt
        st.draft_seconds += draft_share
        st.steps.append((len(draft), n_kept))
        st.record_step(source, len(draft))
        self.stats.by_drafter[source] = self.stats.by_drafter.get(source, 0) + 1
        if draft:
            st.record_acceptance(len(draft), n_kept)
        emit, reason = Session._cut(accepted, self.gen.max_tokens - len(s.output), self.is_eog)
        s.tokens.extend(accepted)
        s.output.extend(emit)
        st.n_generated += len(emit)
        if st.first_token_seconds is None:
            st.first_token_seconds = time.perf_counter() - s.t_admit
        if emit:
            s.stream.push(emit, [i < n_kept for i in range(len(emit))])
            if s.stream.stopped:
                reason = "stop"
        if reason:
            st.n_eog += reason == "eog"
            return self._finish(s, reason)
        return None

    def _finish(self, s: _Slot, reason: str):
        job = s.job
        st = s.stats
        st.stop_reason = reason
        now = time.perf_counter()
        st.decode_seconds = now - s.t_decode if s.t_decode is not None else 0.0
        s.stream.finish()
        if s.index is not None:
            s.index.extend(s.tokens)
            s.index.finish()
        self.stats.n_generated += st.n_generated
        result = Result(
            text=s.stream.text, prompt_tokens=list(job.prompt), tokens=list(s.output), stats=st, seed=job.seed,
            verify=s.verifier.rule, cost_model=self.engine.costs.to_dict() if self.method == "auto" else None,
        )
        s.job = None  # the slot keeps its cells (and tokens) for a later prompt that shares a prefix
        return job, result


def _common(a: list[int], b: list[int], limit: int) -> int:
    """Length of the common prefix of ``a`` and ``b``, at most ``limit``."""
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
