"""``specdec run`` as a library call: pick the models, load them once, generate, report.

``run_request`` takes a ``RunRequest`` (the CLI's options as data), writes text or JSON to
stdout and notes to stderr, and returns the exit code, so tests can call it directly.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import EXIT_FAILURE, EXIT_OK, UsageError
from ..models.methods import Method
from ..pairing.plan import DraftFlags
from ..terminal import console, interrupts
from ..terminal.constraint_args import ConstraintSpec
from ..terminal.prompts import PromptItem, decode_text, read_batch, read_prompt
from .batch import run_batch
from .loading import PairRequest, check_temperature, open_engine, plan_pair
from .structured import check_before_load, grammars_for, item_specs, unmet


@dataclass(frozen=True)
class RunRequest(PairRequest):
    """Every option of ``specdec run``, as data."""

    prompt: str | None = None
    file: Path | None = None
    chat: bool = False
    system: str | None = None
    max_tokens: int = 256
    temp: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    seed: int | None = None
    stop: tuple[str, ...] = ()
    verify: str = "auto"
    force: bool = False  # run even if the memory check says it does not fit
    batch: Path | None = None
    parallel: int | None = None  # --batch: prompts decoded at once (None: chosen from the cost curve)
    constraint: ConstraintSpec | None = None  # --json-schema, --grammar-file or --regex
    as_json: bool = False
    quiet: bool = False
    show_accept: bool = False
    explain_divergence: bool = False
    profile: bool = False  # --batch: where the passes' time went, on stderr at the end


@dataclass(frozen=True)
class _Prompting:
    """What turns a prompt into tokens: the chat template and the system message."""

    chat: bool
    system: str | None


def run_request(req: RunRequest) -> int:
    from ..engine.decode.engine import GenOptions
    from ..engine.verify.verifiers import SamplingParams, resolve_seed

    if req.batch is not None and (req.prompt is not None or req.file is not None):
        raise UsageError("--batch takes its prompts from the file; drop the prompt argument and -f")
    if req.profile and req.batch is None:
        raise UsageError("--profile times the passes of many prompts decoded together",
                         hint="use it with --batch FILE, or with specdec serve")
    if req.explain_divergence and req.temp > 0:
        raise UsageError("--explain-divergence compares greedy runs", hint="use --temp 0")
    check_temperature(req.temp)
    _check_draft_flags(req.draft)
    items = read_batch(req.batch) if req.batch else [PromptItem(text=read_prompt(req.prompt, req.file))]
    system = decode_text(req.system, "--system") if req.system is not None else None
    if system is not None and not req.chat and any(item.messages is None for item in items):
        raise UsageError("--system needs --chat", hint="add --chat to apply the target's chat template with it")
    stop = [decode_text(s, "--stop") for s in req.stop]

    plan = plan_pair(req, follow_bench=not req.explain_divergence)
    if req.explain_divergence and plan.drafter is None:
        raise UsageError("--explain-divergence needs a draft to compare against", hint="pass --draft or --pair")
    tools = check_before_load(req.constraint, items, plan.method.value, chat=req.chat)
    n_seq = _parallel_limit(plan, req, len(items)) if req.batch is not None else 1
    prompting = _Prompting(req.chat, system)
    prompts: list[list[int]] = []  # --batch: every prompt's tokens, read before the caches are sized
    turns: list = []  # each prompt made ready (``toolcalls.turn.Turn``): its tokens, and its tools' grammar

    def read_prompts(engine) -> None:
        from ..toolcalls.turn import ChatPrompter

        prompter = ChatPrompter(engine.target_model, engine.n_ctx_seq)
        turns[:] = [_turn(engine, prompter, item, prompting, t, req.constraint) for item, t in zip(items, tools)]
        prompts[:] = [t.tokens for t in turns]

    def cells(engine) -> int:
        from ..engine.decode.scheduler import cells_for

        read_prompts(engine)
        return cells_for([len(t) + req.max_tokens for t in prompts], n_seq, engine.options.n_ctx)

    engine, _ = open_engine(plan, req.load, _draft_options(plan), method=plan.method.value, force=req.force,
                            quiet=req.quiet, describe=_describe(plan), n_seq=n_seq,
                            cells=cells if req.batch is not None else None)
    try:
        seed = resolve_seed(req.seed) if req.temp > 0 else req.seed
        gen = GenOptions(
            max_tokens=req.max_tokens,
            sampling=SamplingParams(temp=req.temp, top_k=req.top_k, top_p=req.top_p, seed=seed),
            stop=stop,
            verify=req.verify,
        )
        grammar, per_item = grammars_for(engine, req.constraint, items)
        gen = replace(gen, grammar=grammar)
        meta = {
            "target": str(plan.target.value),
            "draft": str(plan.draft.value) if plan.draft.value else None,
            "method": plan.method.value,
            "draft_max": plan.draft_max.value if plan.method.value else None,
            "draft_p_min": plan.p_min.value if plan.draft.value else None,
        }
        if req.batch is not None:
            if not prompts:  # one sequence at a time: no caches to size, the prompts are read now
                read_prompts(engine)
            per_item = [t.grammar if t.tools else g for t, g in zip(turns, per_item)]
            return run_batch(engine, items, prompts, gen, req, meta, n_seq, grammars=per_item, turns=turns)
        return _run_one(engine, items[0], gen, req, prompting, meta)
    finally:
        engine.close()


def _parallel_limit(plan, req: RunRequest, n_items: int) -> int:
    """The most prompts ``--batch`` may decode at once: ``--parallel``, else up to the auto cap,
    never more than the prompts, 1 where the plan's method or memory cannot batch (said on stderr),
    lowered until the memory check passes."""
    from .batch import AUTO_PARALLEL_MAX, batch_blocker
    from .loading import fit_parallel

    want = min(n_items, req.parallel or AUTO_PARALLEL_MAX)
    if want <= 1:
        return 1
    why = batch_blocker(plan)
    if why is not None:
        if not req.quiet or req.parallel:
            console.note(f"one prompt at a time: {why}")
        return 1
    fits = fit_parallel(plan, req.load, plan.draft_max.value, want)
    if fits < want and not req.force:
        console.note(f"{want} prompts at once do not fit in memory; at most {fits}")
        return fits
    return want


def _check_draft_flags(flags: DraftFlags) -> None:
    if flags.draft_max is not None and flags.draft_min is not None and flags.draft_min > flags.draft_max:
        raise UsageError(f"--draft-min {flags.draft_min} is above --draft-max {flags.draft_max}",
                         hint="set --draft-min at most --draft-max")


def _draft_options(plan):
    from ..engine.decode.engine import DraftOptions

    return DraftOptions(draft_max=plan.draft_max.value, draft_min=plan.draft_min.value, p_min=plan.p_min.value)


def _describe(plan) -> str:
    """The stderr line that says what runs, and where each setting came from."""
    draft = plan.draft.value
    mtp = plan.drafter is Method.MTP
    if plan.is_auto:
        # the draft model is one of auto's options, loaded only where the measured costs say it could pay
        model = f" and draft {draft.name} ({plan.draft.source}) where it pays" if draft else ""
        model = f" and the target's MTP layers ({plan.draft.source})" if mtp else model
        what = f"auto: n-gram lookup{model}, chosen per step"
    elif draft:
        what = f"draft {draft.name} ({plan.draft.source})"
    elif mtp:
        what = f"the target's MTP layers ({plan.draft.source})"
    else:
        what = "n-gram drafting" if plan.method.value == "ngram" else "no draft"
    tuning = f", draft-max {plan.draft_max.value} ({plan.draft_max.source})" if plan.method.value else ""
    if draft and not plan.is_auto:
        tuning += f", p-min {plan.p_min.value} ({plan.p_min.source})"
    return f"target {plan.target.value.name}, {what}{tuning}"


def _prompt_tokens(engine, item: PromptItem, prompting: _Prompting) -> list[int]:
    """A prompt's tokens: a chat's through the template, its contents tokenized as text."""
    if item.messages is not None or prompting.chat:
        return engine.chat_prompt(item.as_messages(prompting.system))
    return engine.tokenize_prompt(item.text or "")


def _turn(engine, prompter, item: PromptItem, prompting: _Prompting, tools, spec):
    """A ``--batch`` line made ready: a chat with tools through the ``ChatPrompter`` (the line's
    own schema, else the run's, holds where it does not call), anything else as before."""
    from ..toolcalls.turn import Turn

    if tools is None or not tools.active:
        return Turn(_prompt_tokens(engine, item, prompting), None, frozenset(), None, prompter.format)
    own = item_specs([item])[0] if item.json_schema else spec
    try:
        return prompter.turn(item.as_messages(prompting.system), tools, own)
    except UsageError as exc:
        raise UsageError(f"--batch prompt with id {item.id!r}: {exc}" if item.id is not None else str(exc),
                         hint=exc.hint) from None


def _run_one(engine, item: PromptItem, gen, req: RunRequest, prompting: _Prompting, meta: dict) -> int:
    tokens = _prompt_tokens(engine, item, prompting)
    colour = req.show_accept and console.ansi_ok(sys.stdout)

    def show(segments):
        for text, drafted in segments:
            console.write_text(f"{console.DRAFT_COLOUR}{text}{console.RESET}" if colour and drafted else text)

    divergence_code = EXIT_OK
    report = None
    if req.explain_divergence:
        plain = engine.generate(tokens, gen, use_draft=False, trace=True)
        if plain.interrupted:
            return _finish(plain, req, {**meta, "draft_loaded": engine.draft_loaded}, None)
        result = engine.generate(tokens, gen, on_text=None if req.as_json else show, trace=True)
        report, divergence_code = _explain(plain, result)
    else:
        result = engine.generate(tokens, gen, on_text=None if req.as_json else show)
    meta = {**meta, "draft_loaded": engine.draft_loaded}
    code = _finish(result, req, meta, report)
    why = unmet(result, gen.grammar) if not result.interrupted else None
    if why is not None:
        console.error_line(why)
        return EXIT_FAILURE
    return code if code != EXIT_OK else divergence_code


def _finish(result, req: RunRequest, meta: dict, report: dict | None) -> int:
    """``meta`` carries ``draft_loaded``: auto leaves a draft model that cannot pay unloaded, and
    ``draft`` still names the file it paired."""
    if req.as_json:
        out = {**result.to_dict(), **meta}
        if report is not None:
            out["divergence"] = report
        console.write_json(out)
    elif sys.stdout.isatty() and result.text and not result.text.endswith("\n"):
        console.write_text("\n")
    if not req.quiet:
        console.note(result.stats.summary())
    return interrupts.exit_code() if result.interrupted else EXIT_OK


def _explain(plain, spec) -> tuple[dict, int]:
    """Compare a traced plain run with a traced speculative run; report on stderr."""
    from ..engine.verify.divergence import argmax_violations, first_divergence

    bad = argmax_violations(spec.trace)
    div = first_divergence(plain.tokens, plain.trace, spec.tokens)
    report = {
        "identical": div is None and plain.tokens == spec.tokens,
        "argmax_violations": [p.index for p in bad],
        "first_divergence": div.to_dict() if div else None,
    }
    if bad:
        console.warn(f"{len(bad)} emitted tokens were not the target's argmax (first at {bad[0].index}): a bug")
        return report, EXIT_FAILURE
    if div is None:
        console.note(f"identical to the target alone over {min(len(plain.tokens), len(spec.tokens))} tokens")
        return report, EXIT_OK
    margin = "n/a" if div.margin is None else f"{div.margin:.3f}"
    verdict = "a near-tie (batch-shape numerics), not an error" if div.near_tie else "NOT a near-tie: a bug"
    console.note(
        f"outputs part at generated token {div.index}: target alone chose {div.plain_token}, "
        f"speculative chose {div.spec_token}; their logits in the plain run differ by {margin}: {verdict}"
    )
    return report, EXIT_OK if div.near_tie else EXIT_FAILURE
