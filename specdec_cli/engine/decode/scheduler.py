"""Many prompts at once: continuous batching over one target context, with drafts decided per pass.

The target context holds several sequences in a unified KV cache (one pool of cells every
sequence draws from), or for a server each in a KV stream of its own
(``ContextParams.kv_streams``). Each step is one target pass that carries, for every sequence
that is decoding, its last token and its draft (possibly none), and fills the rest of the batch with
prefill chunks of the sequences still reading their prompts, where the cost model has not
measured that dearer than a pass for each (``_decode_with_prompts``). A finished job's
sequence takes the next waiting prompt at once, so decoding never stalls behind a long
prefill. A prompt that begins like one already in the cache (the same system prompt, the
earlier turns of a conversation) shares those cells instead of computing them again: in place
when the free sequence holding them takes it, else copied (``seq_cp``), or after waiting for
a prompt that is still reading the same prefix. Finished sequences keep their cells until a
later prompt needs the sequence; with more sequences than run at once, the least recently used
goes first (which sequence a prompt takes and what it reuses: ``admission.py``).

Which sequences draft, and how far, is decided for the whole pass (``pass_drafts.py``). Each
sequence is verified on its own rows with its own verifier and sampler (its own RNG), and a
rejected draft is taken back from that sequence alone (``seq_rm``), so a sequence's output
never depends on its neighbours: the same tokens as alone, up to llama.cpp's batch-shape
numerics (the project's notes say how small they are).

Jobs may arrive while others run (``submit``/``step``: the server), each with its own
settings, a callback for its text as it becomes final, and a ``cancelled`` flag that ends it
at the next step. Only targets whose memory drops positions per sequence run here (attention
caches), with the suffix index, n-gram lookup and the draft model; heads, MTP and recurrent or
hybrid targets run one sequence at a time (``session.py``).
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..drafters.auto import AutoDrafter
from ..drafters.draft import Draft
from ..drafters.model_batch import BatchModelDrafter
from ..errors import ContextFull, describe
from ..promptcache.cache import MIN_TOKENS
from ..result import Result
from ..stats import GenerationStats
from ..structured.pass_masks import PassMasks
from .admission import Admission
from .job_start import JobStart
from .jobs import Job, RunStats, SeqSlot, cells_for  # noqa: F401  (Job, cells_for: the scheduler's API)
from .keep import Keeper
from .pass_batch import PassBatch, lay_out
from .pass_drafts import PassDrafter
from .pass_profile import NO_PROFILE, PassProfile

if TYPE_CHECKING:
    from ..options import GenOptions
    from .engine import Engine

RIDE_ANYWAY_EVERY = 8  # while decoding apart from prompt chunks is cheaper, one step in this many rides anyway
APART_SHARE = 0.02  # a prompt's last token goes apart where that pass costs at most this share of its reading


class Scheduler:
    """Runs jobs ``n_parallel`` at a time on an engine loaded with at least that many sequences;
    the context's other sequences keep finished prompts' cells for later ones."""

    def __init__(self, engine: Engine, gen: GenOptions, *, n_parallel: int, method: str | None,
                 first_tokens_first: bool = False, profile: PassProfile = NO_PROFILE):
        """``first_tokens_first`` (a server): a pass that reads the end of a waiting prompt, so
        that its first token comes out of it, carries no drafts of the decoding sequences. On
        a CPU a pass costs about its rows: in an agent loop here a 50-token turn riding with a
        31-token draft took 1.31 s to its first token against 0.85 s with none, while the
        draft, sent one pass later, costs the other sequence about 0.15 s. A batch run, which
        waits for all its answers, drafts in every pass. ``profile``: where each step's time goes
        (``pass_profile.py``; off by default)."""
        self.first_tokens_first = first_tokens_first
        self.engine = engine
        self.ctx = engine.target_ctx
        self.n_parallel = max(1, min(n_parallel, self.ctx.params.n_seq_max))
        self.method = method
        self.ctx_seq = engine.n_ctx_seq  # one sequence's context: --ctx
        self.draft_max = engine.draft_options.draft_max
        self.is_eog = engine.target_model.is_eog
        auto = engine.drafters.get("auto") if method == "auto" else None
        assert auto is None or isinstance(auto, AutoDrafter)
        if auto is not None:
            engine.ensure_costs()  # which loads auto's draft model if it could pay
        model: BatchModelDrafter | None = engine.batch_model if method in ("auto", "draft") else None
        if auto is not None and model is not None and not auto.model_can_pay(self.draft_max):
            model = None  # the draft model cannot pay on this machine: never asked
        self.auto, self.model = auto, model
        self.profile = profile
        self.drafter = PassDrafter(engine.costs, method, auto, model, p_min=engine.draft_options.p_min,
                                   profile=profile)
        self.costs = engine.costs if engine.calibration.ready else None
        self.job_start = JobStart(gen, target=engine.target_model, constraint=engine.constraint, method=method,
                                  auto=auto is not None, sampled_drafts=model is not None)
        self.stats = RunStats(n_parallel=self.n_parallel)
        self.keeper = Keeper(self.ctx, self.drafter, self.stats, self.is_eog, profile)
        self.slots: list[SeqSlot] = []  # every sequence of the context, made by ``start``
        self.waiting: deque[Job] = deque()
        cache = engine.prompt_cache if self.ctx.plain_kv else None
        self.admission = Admission(self.slots, self.ctx, self.waiting, n_parallel=self.n_parallel, cache=cache)
        self._steps_that_could_ride = 0  # steps whose decoding sequences could ride with prompts
        # a step is one pass, so a server takes new requests between any two (``Worker.run``): after
        # a pass that read prompts alone, the decoding sequences go in the next one, alone
        self._decoding_goes_next = False

    # --- the run ---------------------------------------------------------------------------
    def start(self) -> None:
        """Empty caches, every sequence free."""
        self.ctx.kv_clear()
        if self.model is not None:
            self.model.reset()
        for d in self.engine.drafters.values():
            d.set_active(d is self.auto)
        self.slots[:] = [SeqSlot(i) for i in range(self.ctx.params.n_seq_max)]  # in place: admission's too
        self.waiting.clear()
        self.admission.drop_loading()
        self._decoding_goes_next = False

    def submit(self, job: Job) -> None:
        self.waiting.append(job)
        self.stats.n_jobs += 1

    @property
    def busy(self) -> bool:
        return bool(self.waiting) or bool(self.admission.loading) or self.running > 0

    @property
    def running(self) -> int:
        return self.admission.running

    def run(self, jobs: list[Job]) -> Iterator[tuple[Job, Result]]:
        """Yield (job, Result) as each job finishes (not in input order)."""
        self.start()
        for job in jobs:
            self.submit(job)
        while self.busy:
            yield from self.step()

    def step(self) -> list[tuple[Job, Result]]:
        """One pass (or none, when nothing can run); the jobs that ended in it. A fault is the
        faulting sequence's alone (``_fault``); one the pass cannot pin on a sequence ends the
        sequences running (``_recover``), and the scheduler goes on with the waiting ones."""
        t0 = time.perf_counter()
        try:
            return self._step()
        except Exception as exc:  # noqa: BLE001 - a fault ends requests, never the scheduler
            return self._recover(exc)
        finally:
            dt = time.perf_counter() - t0
            self.stats.seconds += dt
            self.profile.add_step(dt)

    def _step(self) -> list[tuple[Job, Result]]:
        with self.profile.stage("admission"):
            done = self._drop_cancelled()
            self.admission.share_ready()
            self.admission.admit(self._start)  # looked up at each step: a caller may wrap it (the fault tests do)
            if self.admission.loading and not self.waiting and not self.running:
                self.admission.back_from_disk(wait=0.05)  # nothing else to do but wait for a file being read
                return done
        reading = [s for s in self.slots if s.job is not None and not s.decoding and s.wait is None]
        if self._decoding_goes_next:  # the last step read prompts alone: the decoding sequences go now, alone
            self._decoding_goes_next, reading = False, []
        elif reading and not self._decode_with_prompts(reading):  # the prompts alone, decoding in the next step
            self._decoding_goes_next = any(s.job is not None and s.decoding for s in self.slots)
            return done + self._pass([], reading)
        decoding = [s for s in self.slots if s.job is not None and s.decoding]
        for s in [s for s in decoding if self.ctx_seq - len(s.tokens) < 0]:
            done.append(self._finish(s, "context"))
        decoding = [s for s in decoding if s.job is not None]
        return done + self._pass(decoding, reading)

    def _decode_with_prompts(self, reading: list[SeqSlot]) -> bool:
        """Whether this step's decoding sequences ride in the pass that reads the prompts of
        ``reading``, or run in a pass of their own after it: as the cost model has measured riding
        against running apart at about that pass's size (``CostModel.observe_ride``), one step
        in ``RIDE_ANYWAY_EVERY`` riding anyway while apart is cheaper, since the answer moves
        with the sequences' depth."""
        n_dec = sum(s.job is not None and s.decoding for s in self.slots)
        if self.costs is None or not n_dec:
            return True
        pending = sum(s.unread for s in reading)
        self._steps_that_could_ride += 1
        return self.costs.rides(n_dec + min(pending, self.ctx.n_batch - n_dec)) or \
            self._steps_that_could_ride % RIDE_ANYWAY_EVERY == 0

    def _pass(self, decoding: list[SeqSlot], reading: list[SeqSlot]) -> list[tuple[Job, Result]]:
        """One target pass over the ``decoding`` sequences (with their drafts) and chunks of the
        prompts of ``reading``; the jobs that ended in it."""
        done: list[tuple[Job, Result]] = []
        prof = self.profile
        decoding, drafts, masks, t_draft = self._drafted(decoding, reading, done)
        with prof.stage("layout"):
            batch = lay_out(decoding, drafts, masks, reading, n_batch=self.ctx.n_batch,
                            n_outputs_max=self.ctx.params.n_outputs_max)
        toks = batch.toks
        if not toks:
            return done
        with prof.stage("cost policy"):  # run at a larger size where the curve says it is cheaper (filler, dropped after)
            size = self.costs.pass_size(len(toks)) if self.costs is not None else len(toks)
        t = time.perf_counter()
        try:
            with prof.stage("batch fill"):
                busy = self.ctx.busy_seconds
                filler = self.ctx.decode_many(toks, batch.pos, batch.seqs, batch.outs, pad=size - len(toks))
                prof.add("llama_decode", self.ctx.busy_seconds - busy)
        except ContextFull:  # the cells ran out: only a --force past the memory check gets here
            return done + [self._finish(s, "context") for s in decoding + reading if s.job is not None]
        except Exception as exc:  # noqa: BLE001 - the pass failed: it ends the sequences it carried
            return done + [self._fault(s, exc) for s in decoding + [c for c, _ in batch.chunks] if s.job is not None]
        dt = time.perf_counter() - t
        with prof.stage("cost policy"):
            self._count_pass(batch, len(decoding), masks, filler, dt)
        prof.count_pass(len(decoding), len(toks) + filler)
        share = t_draft / max(1, len(decoding))
        verify = [(s, d, b, share, m) for s, d, b, m in zip(decoding, drafts, batch.base, masks)]
        # a prompt read to its end drafted nothing, and took no drafting time
        verify += [(s, Draft.nothing(), b, 0.0, None) for s, b in batch.prompt_ends]
        for s, d, b, drafting, m in verify:
            try:
                reason = self.keeper.keep(s, d, b, dt, drafting, m)
                if reason:
                    with prof.stage("finish"):
                        done.append(self._finish(s, reason))
            except Exception as exc:  # noqa: BLE001 - this sequence's fault alone
                done.append(self._fault(s, exc))
        return done

    def _drafted(self, decoding: list[SeqSlot], reading: list[SeqSlot], done: list[tuple[Job, Result]]
                 ) -> tuple[list[SeqSlot], list[Draft], list[PassMasks | None], float]:
        """What the decoding sequences send in this pass, before it is laid out: the sequences
        still running once the grammars have cut the drafts (one that faulted ends, into
        ``done``), their drafts, the masks along them, and the seconds drafting took."""
        pending = sum(s.unread for s in reading)
        caps = self._caps(decoding, reading, reserve=min(pending, self.ctx.n_batch // 4))
        t_draft = time.perf_counter()
        with self.profile.stage("drafting"):
            drafts = self._drafts(decoding, caps, max(0, min(pending, self.ctx.n_batch - len(decoding) - sum(caps))))
        t_draft = time.perf_counter() - t_draft
        with self.profile.stage("masks"):
            masks = self._masks(decoding, drafts, done)
        kept = [i for i, s in enumerate(decoding) if s.job is not None]
        return [decoding[i] for i in kept], [drafts[i] for i in kept], [masks[i] for i in kept], t_draft

    def _count_pass(self, batch: PassBatch, n_decoding_seqs: int, masks: list[PassMasks | None], filler: int,
                    dt: float) -> None:
        """A pass that ran, in the cost model (riding, or a pass's cost by its size), in the run's
        figures, and in the prompts it read (each chunk in its request's timeline)."""
        toks, chunks, n_decoding = batch.toks, batch.chunks, batch.n_decoding
        self.stats.n_filler += filler
        if self.costs is not None and n_decoding_seqs and chunks:  # a pass both read prompts and decoded
            self.costs.observe_ride(dt, len(toks) + filler - n_decoding, n_decoding)
        elif self.costs is not None and all(m is None or m.every_row for m in masks):
            self.costs.observe_pass(len(toks) + filler, dt)  # the curve prices passes with every decoding row
        self.stats.n_passes += 1
        self.stats.seq_passes += n_decoding_seqs
        n_pass = len(toks) + filler
        for s, take in chunks:
            s.n_cached += take
            s.note("prompt pass", rows=take, pass_rows=n_pass, decoding_rows=n_decoding, seconds=round(dt, 4))
            if s.decoding:
                s.stats.prompt_seconds = time.perf_counter() - s.t_admit

    def _masks(self, decoding: list[SeqSlot], drafts: list[Draft], done: list) -> list[PassMasks | None]:
        """Under a grammar, each draft cut to what it allows (in ``drafts``, in place) and the masks
        along the cut draft, as one object (``PassMasks``: why no kept token can be one the grammar
        forbids). A grammar that faults here ends its sequence before the pass (into ``done``)."""
        masks: list[PassMasks | None] = []  # rows the grammar decides alone get no logits
        for i, (s, d) in enumerate(zip(decoding, drafts)):
            try:
                m = PassMasks.along(s.constraint, d.proposal) if s.constraint is not None else None
            except Exception as exc:  # noqa: BLE001 - this sequence's fault alone
                done.append(self._fault(s, exc))
                m = None
            if m is not None:
                drafts[i] = d.cut(m.proposal)
            masks.append(m)
        return masks

    def _drafts(self, decoding: list[SeqSlot], caps: list[int], n_prefill: int) -> list[Draft]:
        """The pass's drafts (``PassDrafter``). A drafter that faults is set aside for the sequence
        it faulted on, which goes on undrafted (its output is the target's either way): the pass
        drafts again one sequence at a time to find which, and the draft model, whose cache the
        fault may have left half caught up, forgets the pass's sequences."""
        caps = [0 if s.draft_off else c for s, c in zip(decoding, caps)]
        try:
            return self.drafter.draft(decoding, caps, n_prefill)
        except Exception:  # noqa: BLE001 - found and set aside below
            pass
        out: list[Draft] = []
        for s, c in zip(decoding, caps):
            if self.model is not None:
                self.model.forget(s.seq)
            try:
                out += self.drafter.draft([s], [c], n_prefill)
            except Exception as exc:  # noqa: BLE001
                s.draft_off = True
                s.stats.drafter_fault = describe(exc)
                out.append(Draft.nothing())
        return out

    def _caps(self, decoding: list[SeqSlot], reading: list[SeqSlot], reserve: int) -> list[int]:
        """The longest draft each decoding sequence may send: its budget and context, and all of them
        within the outputs and tokens one pass takes, leaving ``reserve`` tokens of it to prompts
        still being read (drafts never starve a prefill). Under ``first_tokens_first``, none
        where the first prompt of ``reading`` (it takes the room first) is read to its end in this
        pass with its last token after it, as ``_pass`` lays the batch out."""
        if self.first_tokens_first and reading and reading[0].unread < self.ctx.n_batch - len(decoding) \
                and len(decoding) < self.ctx.params.n_outputs_max:
            return [0] * len(decoding)
        caps = [max(0, min(self.draft_max, s.gen.max_tokens - len(s.output) - 1, self.ctx_seq - len(s.tokens)))
                for s in decoding]
        limit = max(0, min(self.ctx.params.n_outputs_max, self.ctx.n_batch - reserve) - len(decoding))
        while sum(caps) > limit:
            caps[caps.index(max(caps))] -= 1
        return caps

    def _start(self, slot: SeqSlot, job: Job, reused: int) -> None:
        """``job`` takes ``slot`` (``JobStart``); admission's callback, a method so that it may be wrapped."""
        self.job_start.start(slot, job, reused)
        slot.end_apart = self._ends_apart(slot.unread)

    def _ends_apart(self, unread: int) -> bool:
        """Whether a prompt with ``unread`` tokens to read sends its last token in a pass of its own
        after its last chunk, rather than in it: where the prompt cache may keep its cells, whose
        restore sends the last token in such a pass. llama.cpp's logits depend on the pass's
        shape, so only then does a restored prompt's answer equal a cold read's, token for
        token. It costs one pass, so only where the measured curve puts that pass at most
        ``APART_SHARE`` of reading the prompt (on 2 CPU cores a step beside 60-100 s of a 6,000-token
        prompt; on a GPU, whose steps cost about what a short prompt's read does, long prompts
        alone); with no curve, always."""
        if self.admission.cache is None or unread < MIN_TOKENS:
            return False
        if self.costs is None:
            return True
        chunk = min(unread, self.ctx.n_batch)
        reading = -(-unread // chunk) * self.costs.pass_seconds(chunk)
        return self.costs.pass_seconds(1) <= APART_SHARE * reading

    # --- the end of a job ------------------------------------------------------------------
    def _drop_cancelled(self) -> list[tuple[Job, Result]]:
        done = [self._finish(s, "cancelled") for s in self.slots if s.job is not None and s.job.cancelled]
        cancelled = [j for j in self.waiting if j.cancelled]
        for job in cancelled:
            self.waiting.remove(job)
        for job in cancelled + self.admission.take_cancelled():  # queued, or waiting for a file
            done.append((job, Result(text="", prompt_tokens=list(job.prompt), tokens=[],
                                     stats=GenerationStats(method=self.method, n_prompt=len(job.prompt),
                                                           stop_reason="cancelled"))))
        return done

    def _fault(self, s: SeqSlot, exc: BaseException) -> tuple[Job, Result]:
        """End ``s``'s job alone on a fault (stop reason "error", ``stats.fault`` its cause): its
        cells are freed, so no later prompt reuses what it computed, and every other sequence
        goes on untouched."""
        s.stats.fault = describe(exc)
        job, result = self._finish(s, "error")
        s.tokens, s.n_cached, s.n_prompt = [], 0, 0
        with contextlib.suppress(Exception):  # freeing is best effort; the job has ended
            self.ctx.seq_rm(s.seq, -1, -1)
        if self.model is not None:
            with contextlib.suppress(Exception):
                self.model.forget(s.seq)
        return job, result

    def _recover(self, exc: BaseException) -> list[tuple[Job, Result]]:
        """A fault no sequence could be named for: every running job ends with it, the cache is
        emptied (what it holds can no longer be trusted), and the waiting jobs go on."""
        done = [self._fault(s, exc) for s in self.slots if s.job is not None]
        waiting = list(self.waiting) + self.admission.drop_loading()
        self.start()
        self.waiting.extend(waiting)
        return done

    def _finish(self, s: SeqSlot, reason: str) -> tuple[Job, Result]:
        """End ``s``'s job for ``reason``: its held-back text out, its figures in the run's, its
        ``Result``; the sequence free, its cells kept for a later prompt that shares them."""
        job, st = s.job, s.stats
        assert job is not None  # only a running sequence's job ends
        st.stop_reason = reason
        st.stop_string = s.stream.matched
        now = time.perf_counter()
        st.decode_seconds = now - s.t_decode if s.t_decode is not None else 0.0
        st.request_seconds = now - job.arrived
        if reason != "error":  # a faulted job's held-back text and output are not its answer
            tail = s.stream.finish()
            if tail and job.on_text is not None:
                job.on_text(tail)
            if s.index is not None:
                s.index.extend(s.tokens)
                s.index.finish()
        run = self.stats
        run.n_generated += st.n_generated
        run.n_prompt += st.n_prompt
        run.n_prompt_reused += st.n_prompt_reused
        result = Result(
            text=s.stream.text, prompt_tokens=list(job.prompt), tokens=list(s.output), stats=st, seed=job.seed,
            logprobs=s.logprobs,
            verify=s.verifier.rule, cost_model=self.engine.costs.to_dict() if self.method == "auto" else None,
        )
        s.job, s.wait, s.last_used = None, None, now  # the cells stay for a later prompt that shares them
        cache = self.admission.cache
        if cache is not None and reason != "error":  # and are kept lower down for a later turn or run
            with self.profile.stage("prompt cache"):
                cache.offer(s.tokens[: s.n_cached], lambda: self.ctx.seq_state(s.seq))
        return job, result
