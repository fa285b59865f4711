"""The commands that load models and generate: ``run`` (one prompt, or ``--batch``), ``serve``,
``bench`` and ``demo``. Each is a thin function that builds its request from its options
and calls ``commands/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..commands.options import (
    CacheType,
    CacheTypeKOpt,
    CacheTypeVOpt,
    CtxOpt,
    DraftOpt,
    FlashAttn,
    FlashAttnOpt,
    MarginOpt,
    MaxTokensOpt,
    NgldOpt,
    NglOpt,
    NoPromptCacheOpt,
    PairOpt,
    ParallelOpt,
    ProfileOpt,
    PromptCacheOpt,
    PromptCacheSizeOpt,
    QuantOpt,
    RegistryOpt,
    RunMethodOpt,
    TargetOpt,
    TempOpt,
    ThreadsOpt,
    VerboseOpt,
    VerifyOpt,
    YesOpt,
    plain,
    verify_list,
)
from ..errors import UsageError
from ..models.methods import VerifyMode
from .app import _load_options, command


@command()
def run(
    prompt: Annotated[Optional[str], typer.Argument(help="The prompt. Or use -f FILE, or pipe it on stdin.")] = None,
    file: Annotated[Optional[Path], typer.Option("-f", "--file", help="Read the prompt from FILE.")] = None,
    pair: PairOpt = None,
    target: TargetOpt = None,
    draft: DraftOpt = None,
    no_draft: Annotated[bool, typer.Option("--no-draft", help="Run the target alone (the baseline).")] = False,
    chat: Annotated[bool, typer.Option("--chat", help="Apply the target's chat template.")] = False,
    system: Annotated[Optional[str], typer.Option("--system", help="System message (with --chat).")] = None,
    max_tokens: MaxTokensOpt = 256,
    temp: TempOpt = 0.0,
    top_k: Annotated[int, typer.Option("--top-k", min=0, help="Top-k sampling (0 = off).")] = 40,
    top_p: Annotated[float, typer.Option("--top-p", min=0.0, max=1.0, help="Top-p sampling (1 = off).")] = 0.95,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Sampling seed (random if unset; reported in --json).")] = None,
    stop: Annotated[list[str], typer.Option("--stop", help="Stop at this string (repeatable).")] = [],  # noqa: B006
    ctx: CtxOpt = 4096,
    threads: ThreadsOpt = None,
    gpu_layers: NglOpt = "auto",
    gpu_layers_draft: NgldOpt = "auto",
    margin: MarginOpt = 1.0,
    force: Annotated[bool, typer.Option("--force", help="Run even if the memory check says it does not fit.")] = False,
    draft_max: Annotated[Optional[int], typer.Option("--draft-max", min=1, max=64, help="Most tokens drafted per step.")] = None,
    draft_min: Annotated[Optional[int], typer.Option("--draft-min", min=0, help="Drop drafts shorter than this.")] = None,
    draft_p_min: Annotated[Optional[float], typer.Option("--draft-p-min", min=0.0, max=1.0, help="Stop drafting below this draft confidence.")] = None,
    flash_attn: FlashAttnOpt = FlashAttn.AUTO,
    cache_type_k: CacheTypeKOpt = CacheType.F16,
    cache_type_v: CacheTypeVOpt = CacheType.F16,
    batch: Annotated[Optional[Path], typer.Option("--batch", help="JSONL (prompt / messages per line) or plain lines: one JSON result per line on stdout.")] = None,
    parallel: ParallelOpt = None,
    json_schema: Annotated[Optional[str], typer.Option("--json-schema", help="The output is JSON that validates against this schema (inline JSON, or @file.json).")] = None,
    grammar_file: Annotated[Optional[Path], typer.Option("--grammar-file", help="The output follows this grammar (llama.cpp GBNF, or Lark).")] = None,
    regex: Annotated[Optional[str], typer.Option("--regex", help="The output matches this regular expression.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (text, tokens, timings, counts) instead of the text.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No summary on stderr.")] = False,
    show_accept: Annotated[bool, typer.Option("--show-accept", help="Colour the tokens the draft proposed (terminal only).")] = False,
    explain_divergence: Annotated[bool, typer.Option("--explain-divergence", help="Also run without the draft and show where (and why) the outputs differ.")] = False,
    profile: ProfileOpt = False,
    prompt_cache: PromptCacheOpt = None,
    prompt_cache_size: PromptCacheSizeOpt = None,
    no_prompt_cache: NoPromptCacheOpt = False,
    verbose: VerboseOpt = False,
    registry: RegistryOpt = None,
    quant: QuantOpt = None,
    yes: YesOpt = False,
    method: RunMethodOpt = None,
    verify: VerifyOpt = VerifyMode.AUTO,
) -> None:
    """Generate with speculative decoding (or the target alone with --no-draft)."""
    from ..commands.run import RunRequest, run_request
    from ..pairing.plan import DraftFlags, ModelChoice
    from ..terminal.constraint_args import read_constraint

    req = RunRequest(
        prompt=prompt, file=file,
        models=ModelChoice(pair=pair, target=target, draft=draft, quant=quant),
        load=_load_options(ctx, threads, gpu_layers, gpu_layers_draft, margin, flash_attn, cache_type_k, cache_type_v, verbose,
                           prompt_cache, prompt_cache_size, no_prompt_cache),
        draft=DraftFlags(draft_max=draft_max, draft_min=draft_min, p_min=draft_p_min),
        registry=registry, yes=yes, no_draft=no_draft, method=plain(method), chat=chat, system=system,
        max_tokens=max_tokens, temp=temp, top_k=top_k, top_p=top_p, seed=seed, stop=tuple(stop),
        verify=plain(verify), force=force, batch=batch, parallel=parallel, as_json=as_json,
        constraint=read_constraint(json_schema, grammar_file, regex), quiet=quiet, show_accept=show_accept,
        explain_divergence=explain_divergence, profile=profile,
    )
    raise typer.Exit(run_request(req))


@command()
def serve(
    pair: PairOpt = None,
    target: TargetOpt = None,
    draft: DraftOpt = None,
    no_draft: Annotated[bool, typer.Option("--no-draft", help="Serve the target alone.")] = False,
    method: RunMethodOpt = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8080,
    parallel: ParallelOpt = None,
    api_key: Annotated[Optional[str], typer.Option("--api-key", help="Require this bearer token (or set SPECDEC_API_KEY).")] = None,
    model_alias: Annotated[Optional[str], typer.Option("--model-alias", help="The model name /v1/models reports (default: the target's file name).")] = None,
    max_tokens: Annotated[Optional[int], typer.Option("-n", "--max-tokens", min=1, help="A request's default token budget (default: until its context is full).")] = None,
    ctx: CtxOpt = 4096,
    threads: ThreadsOpt = None,
    gpu_layers: NglOpt = "auto",
    gpu_layers_draft: NgldOpt = "auto",
    margin: MarginOpt = 1.0,
    draft_max: Annotated[Optional[int], typer.Option("--draft-max", min=1, max=64, help="Most tokens drafted per step.")] = None,
    flash_attn: FlashAttnOpt = FlashAttn.AUTO,
    cache_type_k: CacheTypeKOpt = CacheType.F16,
    cache_type_v: CacheTypeVOpt = CacheType.F16,
    verbose: VerboseOpt = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No line on stderr per request, no loading notes (warnings and errors still show).")] = False,
    profile: ProfileOpt = False,
    prompt_cache: PromptCacheOpt = None,
    prompt_cache_size: PromptCacheSizeOpt = None,
    no_prompt_cache: NoPromptCacheOpt = False,
    registry: RegistryOpt = None,
    quant: QuantOpt = None,
    yes: YesOpt = False,
) -> None:
    """Serve the pair over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, ...)."""
    from ..commands.serve import ServeRequest
    from ..commands.serve import serve as serve_pair
    from ..pairing.plan import DraftFlags, ModelChoice

    req = ServeRequest(
        models=ModelChoice(pair=pair, target=target, draft=draft, quant=quant),
        load=_load_options(ctx, threads, gpu_layers, gpu_layers_draft, margin, flash_attn, cache_type_k, cache_type_v, verbose,
                           prompt_cache, prompt_cache_size, no_prompt_cache),
        draft=DraftFlags(draft_max=draft_max), registry=registry, yes=yes, no_draft=no_draft, method=plain(method),
        host=host, port=port, parallel=parallel, api_key=api_key, model_alias=model_alias, max_tokens=max_tokens,
        quiet=quiet, profile=profile,
    )
    raise typer.Exit(serve_pair(req))


@command()
def bench(
    pair: PairOpt = None,
    target: TargetOpt = None,
    draft: DraftOpt = None,
    scenarios: Annotated[Optional[str], typer.Option("--scenarios", help="Comma-separated: documents, code, agent, json, qa, creative (default: all).")] = None,
    prompts: Annotated[Optional[Path], typer.Option("--prompts", help="Your own prompt set (JSONL: prompt or messages per line).")] = None,
    chat: Annotated[bool, typer.Option("--chat/--no-chat", help="Apply the chat template to plain prompts.")] = True,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Runs of each prompt and setting.")] = 3,
    max_tokens: Annotated[int, typer.Option("-n", "--max-tokens", min=1, help="Tokens per generation.")] = 128,
    draft_max: Annotated[str, typer.Option("--draft-max", help="Draft lengths to try, e.g. 1,2,4,8,16.")] = "4",
    p_min: Annotated[str, typer.Option("--p-min", help="Draft confidence thresholds to try, e.g. 0,0.5,0.8.")] = "0.5",
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write every figure, per prompt too, to this file.")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Draw tokens/s and speedups to FILE.png or .svg (needs specdec[plot]).")] = None,
    save: Annotated[bool, typer.Option("--save", help="Store the recommended setting for this pair; `run` then uses it.")] = False,
    ctx: CtxOpt = 4096,
    threads: ThreadsOpt = None,
    gpu_layers: NglOpt = "auto",
    gpu_layers_draft: NgldOpt = "auto",
    margin: MarginOpt = 1.0,
    flash_attn: FlashAttnOpt = FlashAttn.AUTO,
    cache_type_k: CacheTypeKOpt = CacheType.F16,
    cache_type_v: CacheTypeVOpt = CacheType.F16,
    verbose: VerboseOpt = False,
    registry: RegistryOpt = None,
    quant: QuantOpt = None,
    yes: YesOpt = False,
    temp: Annotated[float, typer.Option("--temp", min=0.0, help="Temperature (0 = greedy, where outputs are compared).")] = 0.0,
    verify: Annotated[str, typer.Option("--verify", callback=verify_list, help=f"At --temp > 0, rules to compare, e.g. exact,match (of {', '.join(VerifyMode.values())}).")] = "auto",
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed at --temp > 0.")] = 0,
    parallel: Annotated[Optional[str], typer.Option("--parallel", help="Throughput mode: each scenario's prompts as one batch, this many at once, e.g. 1,2,4,8.")] = None,
    json_schema: Annotated[Optional[str], typer.Option("--json-schema", help="Every output obeys this JSON Schema (inline, or @file.json).")] = None,
    grammar_file: Annotated[Optional[Path], typer.Option("--grammar-file", help="Every output follows this grammar (GBNF or Lark).")] = None,
    regex: Annotated[Optional[str], typer.Option("--regex", help="Every output matches this regular expression.")] = None,
    costs: Annotated[bool, typer.Option("--costs", help="Show the cached cost curves and what they decide (no model is loaded), then exit.")] = False,
    reset_costs: Annotated[bool, typer.Option("--reset-costs", help="Empty the cost cache (the next run measures again), then exit.")] = False,
) -> None:
    """Measure speculation on against off on fixed prompt sets, per use case, and recommend settings."""
    if costs or reset_costs:
        from ..commands import costs as cost_view

        if costs and reset_costs:
            raise UsageError("--costs shows the cost cache and --reset-costs empties it: give one of them")

        raise typer.Exit(cost_view.reset() if reset_costs else cost_view.show(json_out))
    from ..commands.bench import BenchRequest, run_bench_request
    from ..pairing.plan import ModelChoice
    from ..terminal.constraint_args import read_constraint

    req = BenchRequest(
        models=ModelChoice(pair=pair, target=target, draft=draft, quant=quant),
        load=_load_options(ctx, threads, gpu_layers, gpu_layers_draft, margin, flash_attn, cache_type_k, cache_type_v, verbose,
                           no_prompt_cache=True),
        registry=registry, yes=yes, scenarios=scenarios, prompts=prompts, chat=chat, repeats=repeats,
        max_tokens=max_tokens, draft_max=draft_max, p_min=p_min, json_out=json_out, plot=plot, save=save,
        temp=temp, verify=tuple(plain(v) for v in verify), seed=seed, parallel=parallel,
        constraint=read_constraint(json_schema, grammar_file, regex),
    )
    raise typer.Exit(run_bench_request(req))


@command()
def demo(
    max_tokens: Annotated[int, typer.Option("-n", "--max-tokens", min=1, help="Tokens to generate in each run.")] = 128,
) -> None:
    """Fetch a small real pair (once) and measure the target alone, the draft model and auto, on new code and on an edit."""
    from ..commands.demo import run_demo

    raise typer.Exit(run_demo(max_tokens=max_tokens))


@command()
def cache(
    clear: Annotated[bool, typer.Option("--clear", help="Delete every saved prompt, then exit.")] = False,
    folder: PromptCacheOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout instead of lines.")] = False,
) -> None:
    """List the prompt cache (long prompts' cells kept on disk across runs and restarts), or empty it."""
    from ..commands import prompt_cache

    raise typer.Exit(prompt_cache.clear(folder) if clear else prompt_cache.show(folder, as_json))
