"""``specdec run --batch``: many prompts, one JSON line each on stdout, in input order.

The prompts are decoded several at a time where the plan allows it (``engine/decode/scheduler.py``):
how many at once is ``--parallel``, else what the measured cost curve says pays, within what
the memory check lets fit and never more than the prompts. A line is written once every
earlier one is, so stdout is the input's order whatever order the jobs end in; a signal ends
the run after the finished lines, in order and whole.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from ..engine.errors import fault_message
from ..errors import EXIT_FAILURE, EXIT_OK
from ..terminal import console, interrupts
from ..terminal.prompts import PromptItem
from .structured import unmet

AUTO_PARALLEL_MAX = 16  # the most prompts at once unless --parallel says more (the curve picks below it)
BATCH_METHODS = (None, "auto", "ngram", "draft")  # what can draft for many sequences in one pass


def batch_blocker(plan) -> str | None:
    """Why this plan runs its prompts one at a time (None: it can run them together), from the
    GGUFs' metadata, before anything loads."""
    from ..models.memory_kinds import Rollback

    info = plan.target_info
    if info is not None and info.rollback is not Rollback.PARTIAL:
        return f"{plan.target.value.name} keeps a memory ({info.memory}) that is taken back one sequence at a time"
    method = plan.method.value
    if method not in BATCH_METHODS:
        return f"{method} drafting reads the target's hidden states one sequence at a time"
    if method == "draft" and plan.draft_info is not None and plan.draft_info.rollback is not Rollback.PARTIAL:
        return f"the draft {plan.draft.value.name} keeps a memory that is taken back one sequence at a time"
    return None


def job_seed(seed: int | None, index: int) -> int | None:
    """Prompt ``index``'s own seed, from the run's: its draws do not depend on its neighbours."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0] & 0x7FFFFFFF)


def run_batch(engine, items: list[PromptItem], prompts: list[list[int]], gen, req,
              meta: dict, n_seq: int, grammars: list | None = None, turns: list | None = None) -> int:
    """Decode every prompt (``prompts[i]``: item i's tokens), write its line in input order,
    summarise on stderr; the exit code.
    ``grammars[i]``: prompt i's compiled constraint (its own, or the run's), None for none; a
    prompt whose output does not satisfy it makes the exit code 1."""
    from ..engine.decode.pass_profile import NO_PROFILE, PassProfile
    from ..engine.decode.scheduler import Job
    from ..engine.policy.decisions import choose_parallel
    from ..engine.stats import GenerationStats

    grammars = grammars or [None] * len(items)
    turns = turns or [None] * len(items)
    jobs = [Job(i, tokens, job_seed(gen.sampling.seed, i),
                gen=replace(gen, grammar=g, shown=t.shown if t is not None else frozenset())
                if g is not gen.grammar else None, sources=t.sources if t is not None else ())
            for i, (tokens, g, t) in enumerate(zip(prompts, grammars, turns))]
    method = engine.method
    parallel = 1
    if n_seq > 1 and engine.batch_support(method) is None:
        parallel = min(req.parallel, n_seq) if req.parallel else choose_parallel(engine.ensure_costs(), n_seq)
    if not req.quiet and len(jobs) > 1:
        console.note(f"{parallel} prompt{'s' if parallel > 1 else ''} at once"
                     + ("" if req.parallel else " (chosen from the measured cost of a pass)"))
    profile = PassProfile() if req.profile and parallel > 1 else NO_PROFILE
    if req.profile and parallel == 1:
        console.note("no profile: the prompts run one at a time, not in shared passes")
    results = _sequential(engine, jobs, gen) if parallel == 1 else \
        engine.run_many(jobs, gen, n_parallel=parallel, profile=profile)
    total = GenerationStats()
    done: dict[int, object] = {}
    printed: set[int] = set()
    next_line = [0]

    def write(i: int) -> None:
        """One whole line; a signal waits until it is written and counted."""
        with interrupts.native():
            _write(i, items[i], done[i], {**meta, "draft_loaded": engine.draft_loaded}, parallel, turns[i])
            printed.add(i)

    def flush() -> None:
        """The finished lines up to the first prompt still running, in input order."""
        while next_line[0] in done:
            if next_line[0] not in printed:
                write(next_line[0])
            next_line[0] += 1

    code = EXIT_OK
    unsatisfied: list[int] = []
    faulted: list[int] = []
    t0 = time.perf_counter()
    try:
        for job, result in results:
            done[job.index] = result
            total.merge(result.stats)
            if not req.quiet:
                console.note(f"[{len(done)}/{len(jobs)}] #{job.index}: {result.stats.summary()}")
            flush()
            if result.interrupted:
                code = interrupts.exit_code()
                break
            if result.stats.stop_reason == "error":  # a fault ended this prompt alone: its line says so
                faulted.append(job.index)
                console.warn(f"prompt {job.index + 1}: {fault_message(result.stats.fault)}")
                continue
            why = unmet(result, grammars[job.index])
            if why is not None:
                unsatisfied.append(job.index)
                console.warn(f"prompt {job.index + 1}: {why}")
    except KeyboardInterrupt as exc:
        code = interrupts.exit_code(exc)
    if code != EXIT_OK:
        for i in sorted(set(done) - printed):  # every finished one, in order, whole
            write(i)
        console.warn(f"interrupted after {len(done)} of {len(jobs)} prompts")
    if not req.quiet and len(done) > 1:
        run = getattr(engine, "last_run", None) if parallel > 1 else None
        seconds = time.perf_counter() - t0  # the batch's processing time, model load excluded
        # one at a time too, the rate is the batch's (its decoding rate alone read as fast as 12 at once)
        line = run.summary(method) if run is not None else total.summary(total.n_generated / seconds)
        console.note(f"{'all ' if len(done) == len(jobs) else ''}{len(done)} prompts in {seconds:.2f} s: {line}")
    for note in profile.lines() if profile.enabled else ():
        console.note(note)
    if code == EXIT_OK and faulted:
        console.error_line(f"{len(faulted)} of {len(jobs)} prompts stopped on an internal fault "
                           f"(prompts {', '.join(str(i + 1) for i in faulted[:10])}); their lines hold the error")
        return EXIT_FAILURE
    if code == EXIT_OK and unsatisfied:
        console.error_line(f"{len(unsatisfied)} of {len(jobs)} outputs do not satisfy their constraint "
                           f"(prompts {', '.join(str(i + 1) for i in unsatisfied[:10])}); their lines say why they stopped")
        return EXIT_FAILURE
    return code


def _write(i: int, item: PromptItem, result, meta: dict, parallel: int, turn=None) -> None:
    if result.stats.stop_reason == "error":  # an error object, not a half answer
        console.write_json({"index": i, "id": item.id, "error": {"type": "internal_fault",
                            "message": fault_message(result.stats.fault)}, "stop_reason": "error", **meta,
                            "parallel": parallel})
        return
    console.write_json({"index": i, "id": item.id, **result.to_dict(), **_calls(result, turn), **meta,
                        "parallel": parallel})


def _calls(result, turn) -> dict:
    """A line that offered tools: its reply's content and calls, as the server's message spells them."""
    from ..serve.openai_out import finish_reason
    from ..serve.wire import CallIds, chat_message

    if turn is None or not turn.tools:
        return {}
    reply = turn.read(result.text)
    message = chat_message(reply, CallIds(turn.format.new_id))
    return {"content": message["content"], "tool_calls": message.get("tool_calls", []),
            "finish_reason": finish_reason(result, reply)}


def _sequential(engine, jobs, gen) -> Iterator[tuple[object, object]]:
    """One prompt after another on the one-sequence path, each with its own seed and settings."""
    from ..engine.errors import GenerationFault, describe
    from ..engine.result import Result
    from ..engine.stats import GenerationStats

    for job in jobs:
        own = job.gen or gen
        try:
            yield job, engine.generate(job.prompt, replace(own, sampling=replace(own.sampling, seed=job.seed)))
        except GenerationFault as exc:  # this prompt's alone: the next ones run
            stats = GenerationStats(method=engine.method, n_prompt=len(job.prompt), stop_reason="error",
                                    fault=describe(exc.cause))
            yield job, Result(text="", prompt_tokens=list(job.prompt), tokens=[], stats=stats, seed=job.seed)
