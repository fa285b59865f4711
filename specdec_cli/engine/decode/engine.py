"""Load a target (and optionally a draft) once, then generate for as many prompts as asked.

This is the library entry point behind ``specdec run``, ``bench`` and ``serve``: it owns the
models and contexts, turns a prompt into tokens (with the chat template when asked), drives a
``Session`` for one sequence (streaming text through ``TextStream`` into a ``Result``) or a
``Scheduler`` for many at once (``run --batch``, bench's throughput, serve's requests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ...errors import SpecdecError, UsageError
from ...models.memory_kinds import Rollback, snapshots_for
from ...models.methods import Method
from ...terminal.textstream import Segment, TextStream
from ..chat.prompt import chat_tokens
from ..chat.template import apply_chat_template
from ..drafters.auto import AutoDrafter
from ..drafters.base import Drafter
from ..drafters.dflash import DFlashDrafter
from ..drafters.eagle3 import Eagle3Drafter
from ..drafters.model import ModelDrafter
from ..drafters.model_batch import BatchModelDrafter
from ..drafters.mtp import MtpDrafter
from ..drafters.ngram import NgramDrafter
from ..errors import ContextFull, GenerationFault, PromptTooLong
from ..llama.context import Context, ContextParams
from ..llama.model import Model
from ..options import DraftOptions, EngineOptions, GenOptions
from ..policy.costmodel import CostModel
from ..promptcache.cache import PromptCache
from ..result import Result, TracePoint
from ..structured.constraint import Constraint, tokenizer_for
from ..verify.rollback import CacheRollback
from ..verify.verifiers import Sampler, make_verifier, resolve_verify
from .engine_costs import EngineCosts, leaves_draft_out, left_out_note
from .jobs import RunStats
from .pass_profile import NO_PROFILE, PassProfile
from .scheduler import Job, Scheduler
from .session import Session

DRAFT_METHODS = Method.with_draft_file()  # the methods that load a draft GGUF
AUTO_DRAFT_MAX = 32  # auto's longest draft when --draft-max is not given: the policy picks per step


class Engine:
    """A loaded target (+ draft) pair, reusable across prompts."""

    def __init__(
        self,
        target_path: str | Path,
        draft_path: str | Path | None = None,
        *,
        options: EngineOptions | None = None,
        draft: DraftOptions | None = None,
        method: str | None = None,
        mtp: bool = False,
        warn: Callable[[str], None] | None = None,
        note: Callable[[str], None] | None = None,
        cells: Callable[[Engine], int] | None = None,
    ):
        """``method``: the drafting method generations use by default: "draft" (a classic
        draft model), "eagle3", "dflash" or "dspark" (a draft head, which reads this target's
        hidden states), all of which need ``draft_path``, "mtp" (the target's own nextn
        layers), or "ngram"; None = "draft" when a draft is given, else the target alone.
        n-gram lookup is always available to ``generate(method="ngram")``: it costs nothing.
        "auto" chooses per step between the suffix index, a step-by-step drafter (the draft
        model when given, else the target's MTP layers when ``mtp``) and plain decoding, from
        costs measured on this machine. ``mtp`` loads the MTP layers (method "mtp" implies it).
        ``warn`` receives notes on settings a drafter cannot honour (a draft longer than a
        head's block), on a target that cannot take drafts back at all (auto then runs it
        alone) and on an unusable cost cache; ``note``, on a draft model auto leaves unloaded
        because it cannot pay on this machine. ``cells``: with ``n_seq`` > 1, called once the
        target is loaded and before any context is made, with this engine (it can tokenize by
        then): the cells the unified caches need, when the jobs are known up front
        (``scheduler.cells_for``); None: ``n_seq`` × ``n_ctx``, as for a server."""
        self.options = options or EngineOptions()
        self.draft_options = draft or DraftOptions()
        self.method = method or ("draft" if draft_path is not None else None)
        self.warn = warn
        self.note = note
        if self.method in DRAFT_METHODS and draft_path is None:
            raise ValueError(f"the {self.method} method needs a draft")
        use_mtp = (mtp or self.method == Method.MTP) and draft_path is None
        self._load_target(target_path, use_mtp, cells)
        self.draft_path = Path(draft_path) if draft_path is not None else None
        self.costs = CostModel()  # the measured costs every decision reads (``calibration`` keeps them)
        if self.target_rollback.kind is Rollback.CHECKPOINT:
            self.costs.checkpoint = {}  # auto weighs the state copies and replays of rejections
        self._load_drafters(use_mtp)
        self.calibration = EngineCosts(self.costs, target=self.target_model, target_ctx=self.target_ctx,
                                       options=self.options, draft_path=self.draft_path,
                                       mtp="mtp" in self.drafters, warn=warn)
        self.last_run: RunStats | None = None  # the figures of the last ``run_many``
        self.prompt_cache: PromptCache | None = None  # saved prompts' cells (set by whoever opens one)

    def _load_target(self, target_path: str | Path, use_mtp: bool, cells: Callable[[Engine], int] | None) -> None:
        """The target model and its context, sized for the sequences and drafts it will carry, and
        how its memory takes a rejected draft back (which may leave auto without drafts)."""
        opts = self.options
        self.target_model = Model(target_path, n_gpu_layers=opts.gpu_layers, load_mtp=use_mtp, verbose=opts.verbose)
        if use_mtp and not self.target_model.mtp_loaded:
            raise UsageError(f"{self.target_model.path.name} has no MTP (nextn) layers to draft with",
                             hint="use a GGUF converted with its MTP layers, or another drafting method")
        # the many-sequence caches: every cell is allocated and cleared when the context is made
        # (about a second per GB here), so a batch of short jobs gets what it can use, not n_seq
        # whole contexts (12 × 4,096 cells are 1.4 GB for a 1.5B target)
        self.n_cells = opts.n_seq * opts.n_ctx
        if opts.n_seq > 1 and cells is not None:
            self.n_cells = max(1, min(self.n_cells, cells(self)))
        self.draft_model: Model | None = None
        self.draft_ctx: Context | None = None
        # output rows are allocated as used, so room for the longest draft costs nothing up front;
        # a hybrid target keeps per-token snapshots of its recurrent state for as long a draft
        snapshots = snapshots_for(self.draft_options.draft_max) if self.method and opts.snapshots else 0
        rows = min(opts.n_batch, opts.n_seq * (1 + self.draft_options.draft_max))
        params = opts.context_params(rows, snapshots, n_seq=opts.n_seq, n_cells=self.n_cells, streams=opts.kv_streams)
        self.target_ctx = Context(self.target_model, params)
        self.target_rollback = self._target_rollback()

    def _load_drafters(self, use_mtp: bool) -> None:
        """The drafters this engine offers: n-gram lookup always, the draft model (under auto,
        only once the costs say it could pay: ``_settle_draft``) or the target's MTP layers, and
        auto over whichever step-by-step drafter there is."""
        self.drafters: dict[str, Drafter] = {"ngram": NgramDrafter()}
        self.batch_model: BatchModelDrafter | None = None  # the draft model for many sequences at once
        self.draft_left_out = False  # True while auto leaves the draft unloaded (told to ``note`` once)
        # under auto the draft model loads once the costs are known, and only if it could pay
        self._draft_pending = self.draft_path is not None and self.method == "auto"
        if self.draft_path is not None and not self._draft_pending:
            self._load_draft(self.method if self.method in DRAFT_METHODS else "draft")
        elif use_mtp:
            self.drafters["mtp"] = self._make_mtp()
        stepwise = self.drafters.get("draft") or self.drafters.get("mtp")
        self.drafters["auto"] = AutoDrafter(self.costs, stepwise)

    @property
    def draft_loaded(self) -> bool:
        """Whether a draft model is loaded (auto leaves one that cannot pay out)."""
        return self.draft_model is not None

    def _load_draft(self, kind: str) -> Drafter:
        assert self.draft_path is not None, "a draft is loaded only where one was given"
        opts = self.options
        ngl = opts.gpu_layers if opts.gpu_layers_draft is None else opts.gpu_layers_draft
        self.draft_model = Model(self.draft_path, n_gpu_layers=ngl, verbose=opts.verbose)
        self.drafters[kind] = drafter = self._make_drafter(kind, self.warn)
        return drafter

    def _settle_draft(self) -> Context | None:
        """Auto's draft model, once the costs are known (``EngineCosts``): loaded, unless a figure
        from a quiet machine says it cannot pay (``leaves_draft_out``). With no measured draft
        cost yet it loads, and is measured; a figure measured while the machine was busy is
        dropped and measured again once it is loaded. Returns the draft model's context, if
        one is loaded, for its cost to be measured."""
        if self._draft_pending:
            c, n_max = self.costs, self.draft_options.draft_max
            if not leaves_draft_out(c, n_max):
                if "draft" in c.drafts and not c.quiet:
                    c.drafts.pop("draft")  # measured while the machine was busy: measured again once loaded
                self._draft_by_name()
            else:
                if not self.draft_left_out and self.note:
                    self.note(left_out_note(c, Path(self.draft_path or "draft").name, n_max))
                self.draft_left_out = True  # until costs on which it could pay are set (``set_costs``)
        return self.draft_ctx if "draft" in self.drafters else None

    # --- the costs (``EngineCosts``) -----------------------------------------------------------
    def ensure_costs(self) -> CostModel:
        """The cost model, calibrated (or read from the cache) the first time it is needed."""
        return self.calibration.ensure(self._settle_draft)

    def set_costs(self, model: CostModel) -> None:
        """Decide with ``model`` instead of measuring (an injected curve: tests, what-ifs); not cached."""
        self.calibration.set(model, self._settle_draft)

    def save_costs(self) -> None:
        self.calibration.save()

    @property
    def _costs_ready(self) -> bool:
        """Whether the costs were calibrated, read from the cache or injected (``EngineCosts.ready``)."""
        return self.calibration.ready

    @_costs_ready.setter
    def _costs_ready(self, ready: bool) -> None:
        self.calibration.ready = ready

    def _cost_key(self, path: Path, ngl: int) -> str:
        return self.calibration.key(path, ngl)

    def _draft_by_name(self) -> None:
        """``method="draft"`` on an auto engine: its draft model, loaded now whatever it costs."""
        if self._draft_pending:
            self._draft_pending = False
            self.draft_left_out = False
            auto = self.drafters["auto"]
            assert isinstance(auto, AutoDrafter)
            auto.attach(self._load_draft("draft"))

    def _target_rollback(self) -> CacheRollback:
        """How the target's memory takes a rejected draft back, probed as llama.cpp does."""
        kind = self.target_ctx.probe_rollback()
        if kind is Rollback.NONE and self.method is not None:
            name = self.target_model.path.name
            if self.method != "auto":
                raise SpecdecError(f"{name} keeps no memory that can drop positions, so no draft can be checked on it",
                                   hint="run it without drafting (--no-draft)")
            if self.warn:
                self.warn(f"{name} keeps no memory that can drop positions: running the target alone")
            self.method = None
        return CacheRollback(self.target_ctx, kind)

    def _make_drafter(self, kind: str, warn) -> Drafter:
        d, draft_model = self.draft_options, self.draft_model
        assert draft_model is not None, "_load_draft loads it first"
        if kind == "draft":
            n_seq = self.options.n_seq
            self.draft_ctx = Context(draft_model, self._ctx_params(n_seq, n_seq=n_seq))
            rollback = CacheRollback(self.draft_ctx, self.draft_ctx.probe_rollback())
            if rollback.kind is Rollback.NONE:
                raise SpecdecError(f"the draft {draft_model.path.name} keeps no memory that can drop positions",
                                   hint="use another draft model, or --method ngram")
            if n_seq > 1 and rollback.kind is Rollback.PARTIAL:
                self.batch_model = BatchModelDrafter(self.draft_ctx)
            return ModelDrafter(self.draft_ctx, n_min=d.draft_min, p_min=d.p_min, rollback=rollback)
        if self.target_rollback.kind is Rollback.CHECKPOINT:
            raise UsageError(
                f"{draft_model.path.name} reads the target's hidden states, which specdec does not keep "
                f"in step across a checkpoint restore of {self.target_model.path.name}'s recurrent memory",
                hint="use --method draft, ngram or mtp with this target")
        # a head borrows the target's embeddings and output projection (llama.cpp's ctx_other);
        # a block head outputs every slot of its block, as llama.cpp sizes its draft context
        rows = 1 if kind == "eagle3" else d.draft_max + 1
        self.draft_ctx = Context(draft_model, self._ctx_params(rows), other=self.target_ctx)
        if kind == "eagle3":
            return Eagle3Drafter(self.target_ctx, self.draft_ctx, n_max=d.draft_max, n_min=d.draft_min, p_min=d.p_min)
        return DFlashDrafter(self.target_ctx, self.draft_ctx, n_max=d.draft_max, n_min=d.draft_min,
                             p_min=d.p_min, dspark=kind == "dspark", warn=warn)

    def _make_mtp(self) -> MtpDrafter:
        """The target's own nextn layers, in an MTP context beside the target's (llama.cpp's
        LLAMA_CONTEXT_TYPE_MTP: a KV cache for those layers only)."""
        d = self.draft_options
        self.draft_ctx = Context(self.target_model, replace(self._ctx_params(1), mtp=True), other=self.target_ctx)
        return MtpDrafter(self.target_ctx, self.draft_ctx, n_max=d.draft_max, n_min=d.draft_min, p_min=d.p_min)

    @property
    def drafter(self) -> Drafter | None:
        """The drafter of the default method (None: the target alone)."""
        return self.drafters.get(self.method) if self.method else None

    def _ctx_params(self, n_outputs: int, n_rs_seq: int = 0, *, n_seq: int = 1) -> ContextParams:
        return self.options.context_params(n_outputs, n_rs_seq, n_seq=n_seq, n_cells=self.n_cells)

    def constraint(self, grammar) -> Constraint:
        """A grammar's state for one generation, over this target's vocabulary."""
        return Constraint(grammar, tokenizer_for(self.target_model), n_vocab=self.target_model.n_vocab)

    @property
    def n_ctx_seq(self) -> int:
        """The positions one sequence may use: the context's own size (llama.cpp may round it up),
        or ``n_ctx`` of a context made for several sequences (within its cells, or its stream's)."""
        o = self.options
        if o.n_seq == 1:
            return self.target_ctx.n_ctx
        return min(o.n_ctx, self.n_cells // o.n_seq if o.kv_streams else self.n_cells)  # a stream's, or the pool's

    # --- prompts ----------------------------------------------------------------------------
    def render_chat(self, messages: list[dict]) -> str:
        return apply_chat_template(self.target_model, messages, add_generation_prompt=True)

    def chat_prompt(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """A conversation's prompt tokens, its contents tokenized as text (``chat/prompt.py``)."""
        return chat_tokens(self.target_model, messages, tools, n_ctx=self.n_ctx_seq)

    def tokenize_prompt(self, text: str) -> list[int]:
        """Tokens of a prompt; the BOS is not doubled when a chat template already wrote it."""
        m = self.target_model
        bos_text = m.token_text(m.bos) if m.bos >= 0 else ""
        add_special = not (bos_text and text.startswith(bos_text))
        tokens = m.tokenize(text, add_special=add_special, parse_special=True)
        if not tokens:
            raise UsageError("the prompt is empty", hint="pass some text, -f FILE, or pipe it on stdin")
        if len(tokens) >= self.n_ctx_seq:
            raise PromptTooLong(self.n_ctx_seq, len(tokens))
        return tokens

    # --- generation -------------------------------------------------------------------------
    def session(
        self,
        gen: GenOptions,
        *,
        use_draft: bool = True,
        trace: list[TracePoint] | None = None,
        method: str | None = None,
    ) -> Session:
        """The decode loop for one generation: its verifier, and one ``Sampler`` (one RNG,
        seeded from ``gen.sampling.seed``) shared by the verifier and, for sampled proposals,
        the drafter. ``session.verifier.rule`` says which rule ``gen.verify`` resolved to.
        ``method`` overrides the engine's default drafting method for this generation."""
        if method == "draft":
            self._draft_by_name()
        drafter = self.drafters[method] if method else self.drafter
        drafter = drafter if use_draft else None
        if drafter is not None and drafter.method == "auto":
            self.ensure_costs()
        for d in self.drafters.values():
            if d is not drafter:
                d.set_active(False)
        if drafter is not None:
            drafter.set_active(True)
        constraint = self.constraint(gen.grammar) if gen.grammar is not None else None
        # under a grammar every draft is greedy (a point mass), so the exact rule needs no masked q
        sampled = drafter.sampled_proposals and constraint is None if drafter is not None else True
        rule = resolve_verify(gen.verify, gen.sampling.temp, sampled_drafts=sampled)
        sampler = Sampler(gen.sampling) if rule != "greedy" else None
        return Session(
            self.target_ctx,
            make_verifier(rule, sampler),
            drafter,
            draft_max=self.draft_options.draft_max,
            trace=trace,
            draft_sampler=sampler if rule == "exact" and sampled else None,
            costs=self.costs if self.calibration.ready else None,
            rollback=self.target_rollback,
            n_ctx=self.n_ctx_seq,
            constraint=constraint,
            prompt_cache=self.prompt_cache,
        )

    def generate(
        self,
        prompt_tokens: list[int],
        gen: GenOptions,
        *,
        use_draft: bool = True,
        on_text: Callable[[list[Segment]], None] | None = None,
        trace: bool = False,
        method: str | None = None,
    ) -> Result:
        """Generate from ``prompt_tokens``; ``on_text`` receives text as soon as it is final."""
        points: list[TracePoint] | None = [] if trace else None
        session = self.session(gen, use_draft=use_draft, trace=points, method=method)
        stream = TextStream(self.target_model.piece_showing(gen.shown), gen.stop)
        tokens: list[int] = []
        steps = session.run(prompt_tokens, gen.max_tokens)
        try:
            for step in steps:
                tokens.extend(step.tokens)
                segs = stream.push(step.tokens, step.from_draft)
                if segs and on_text:
                    on_text(segs)
                if stream.stopped:
                    steps.close()
                    session.stats.stop_reason = "stop"
                    break
        except KeyboardInterrupt:
            steps.close()
            session.stats.stop_reason = "interrupted"
        except ContextFull:
            steps.close()
            session.stats.stop_reason = "context"
        except SpecdecError:
            raise
        except Exception as exc:  # a grammar's state, the tokenizer, NaN logits: this generation's fault
            steps.close()
            raise GenerationFault(exc) from exc
        tail = stream.finish()
        if tail and on_text:
            on_text(tail)
        return Result(
            text=stream.text,
            prompt_tokens=list(prompt_tokens),
            tokens=tokens,
            stats=session.stats,
            seed=gen.sampling.seed,
            trace=points,
            verify=session.verifier.rule,
            cost_model=self.costs.to_dict() if session.stats.method == "auto" else None,
        )

    def batch_support(self, method: str | None) -> str | None:
        """Why ``method`` cannot decode many sequences at once on this engine (None: it can)."""
        if self.options.n_seq < 2:
            return "the engine was loaded for one sequence"
        if self.target_rollback.kind is not Rollback.PARTIAL:
            return f"{self.target_model.path.name} keeps a {self.target_rollback.kind} memory"
        if method not in (None, "auto", "ngram", "draft"):
            return f"{method} drafting reads the target's hidden states one sequence at a time"
        if method == "draft":
            self._draft_by_name()
        if method == "draft" and self.batch_model is None:
            return "the draft model keeps a memory that cannot drop positions"
        return None

    def scheduler(self, gen: GenOptions, *, n_parallel: int, method: str | None = None,
                  use_draft: bool = True, first_tokens_first: bool = False,
                  profile: PassProfile = NO_PROFILE) -> Scheduler:
        """A scheduler for jobs that arrive over time (the server): ``start`` it, ``submit`` jobs,
        ``step`` while it is ``busy``. ``method`` overrides the engine's (``use_draft`` False:
        none); ``batch_support`` must have said yes to it. ``first_tokens_first``: see
        ``Scheduler``."""
        method = (method or self.method) if use_draft else None
        why = self.batch_support(method)
        if why is not None:
            raise ValueError(f"cannot decode many sequences at once: {why}")
        return Scheduler(self, gen, n_parallel=n_parallel, method=method, first_tokens_first=first_tokens_first,
                         profile=profile)

    def run_many(self, jobs: list[Job], gen: GenOptions, *, n_parallel: int, use_draft: bool = True,
                 method: str | None = None, profile: PassProfile = NO_PROFILE):
        """Decode ``jobs`` ``n_parallel`` at a time (continuous batching, ``scheduler.py``); yields
        (job, Result) as each ends, as ``scheduler`` sets it up. The run's figures are in
        ``self.last_run``."""
        sched = self.scheduler(gen, n_parallel=n_parallel, method=method, use_draft=use_draft, profile=profile)
        self.last_run = sched.stats
        yield from sched.run(jobs)

    def set_draft(self, *, draft_max: int, p_min: float) -> None:
        """Change the draft settings between generations (bench's grid); draft_max is capped by
        the target context's output rows, sized for the largest draft at load time."""
        cap = self.target_ctx.params.n_outputs_max - 1
        if draft_max > cap:
            raise ValueError(f"draft_max {draft_max} exceeds the {cap} this engine was loaded for")
        self.draft_options.draft_max = draft_max
        self.draft_options.p_min = p_min
        for drafter in self.drafters.values():
            drafter.configure(n_max=draft_max, p_min=p_min)

    def busy_seconds(self) -> float:
        """Time both contexts have spent inside llama_decode: the rest of a run is overhead."""
        return sum(c.busy_seconds for c in (self.target_ctx, self.draft_ctx) if c is not None)

    def close(self) -> None:
        self.save_costs()
        if self.prompt_cache is not None:
            self.prompt_cache.close()
        for drafter in self.drafters.values():
            drafter.close()
        for obj in (self.draft_ctx, self.draft_model, self.target_ctx, self.target_model):
            if obj is not None:
                obj.close()
