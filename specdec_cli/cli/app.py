"""The ``specdec`` commands: one thin function per command over the library.

Each command builds its request explicitly from its options (shared ones are declared once in
``commands/options.py``) and hands it to a function in ``commands/``.
"""

from __future__ import annotations

import functools
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
    JsonOpt,
    MarginOpt,
    MaxTokensOpt,
    MethodFilterOpt,
    NgldOpt,
    NglOpt,
    PairOpt,
    ParallelOpt,
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
from ..models.methods import VerifyMode
from ..terminal import console

app = typer.Typer(
    name="specdec",
    help="Speculative decoding with llama.cpp: pair a target GGUF with a draft, check it fits, run it, measure it.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    """``--version``: this package's version and the llama.cpp binding it runs on (from the
    installed metadata: loading the library itself would take a second)."""
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    from .. import __version__

    try:
        binding = f"llama-cpp-python {version('llama_cpp_python')}"
    except PackageNotFoundError:
        binding = "llama-cpp-python not installed"
    console.write_text(f"specdec {__version__} ({binding})\n")
    raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Speculative decoding with llama.cpp: pair a target GGUF with a draft, check it fits, run it, measure it."""


class _Escaped(Exception):
    """A signal that ended a command: carried past typer, which would turn it into a silent 130."""

    def __init__(self, interrupt: KeyboardInterrupt):
        super().__init__()
        self.interrupt = interrupt


def command(*args, **kwargs):
    """``app.command``, with a signal that ends the command reported as one line and 128+signal."""

    def register(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            try:
                return fn(*a, **k)
            except KeyboardInterrupt as exc:
                raise _Escaped(exc) from None

        return app.command(*args, **kwargs)(wrapper)

    return register


def _load_options(ctx, threads, gpu_layers, gpu_layers_draft, margin, flash_attn, cache_type_k, cache_type_v, verbose):
    from ..commands.loading import LoadOptions

    return LoadOptions(ctx=ctx, threads=threads, gpu_layers=gpu_layers, gpu_layers_draft=gpu_layers_draft,
                       margin=margin, flash_attn=plain(flash_attn), cache_type_k=plain(cache_type_k),
                       cache_type_v=plain(cache_type_v), verbose=verbose)


# --- registry and metadata ------------------------------------------------------------------


@command()
def pairs(
    method: MethodFilterOpt = None,
    target: Annotated[Optional[str], typer.Option("--target", help="Only entries whose target matches this text.")] = None,
    as_json: JsonOpt = False,
    registry: RegistryOpt = None,
) -> None:
    """List the registry of target/draft pairs."""
    from ..commands.views import pairs_table
    from ..pairing.registry import load_registry

    entries = load_registry(registry).filter(method=plain(method), target=target)
    if as_json:
        console.write_json([e.to_dict() for e in entries])
    else:
        pairs_table(entries)


@command()
def inspect(
    file: Annotated[Path, typer.Argument(help="A GGUF file.")],
    as_json: JsonOpt = False,
) -> None:
    """Show a GGUF's metadata (architecture, sizes, vocabulary, chat template, draft method) without loading weights."""
    from ..commands.views import info_table
    from ..models.meta import read_gguf

    info = read_gguf(file)
    if as_json:
        console.write_json(info.to_dict())
    else:
        info_table(info)


TargetFileOpt = Annotated[Path, typer.Option("--target", "-t", help="Target GGUF.")]


@command()
def check(
    target: TargetFileOpt,
    draft: Annotated[Optional[Path], typer.Option("--draft", "-d", help="Draft GGUF (leave out for a target with MTP layers).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Say whether a draft can serve a target, before loading any weights. Exit 0 compatible, 1 not, 2 usage error."""
    from ..commands.views import verdict_table
    from ..models.meta import read_gguf
    from ..pairing.compat import check_pair, check_self

    tinfo = read_gguf(target)
    dinfo = read_gguf(draft) if draft is not None else None
    verdict = check_pair(tinfo, dinfo, method=dinfo.spec_method or "draft") if dinfo else check_self(tinfo)
    if as_json:
        console.write_json(verdict.to_dict())
    else:
        verdict_table(verdict, tinfo, dinfo)
    raise typer.Exit(0 if verdict.ok else 1)


# --- models on this machine ------------------------------------------------------------------


@command()
def pull(
    what: Annotated[str, typer.Argument(help="A registry pair name, or a model reference: hf://org/repo/file.gguf, org/repo:Q4_K_M.")],
    quant: QuantOpt = None,
    registry: RegistryOpt = None,
) -> None:
    """Download a pair's target and draft GGUFs (or one model) into the Hugging Face cache; print their paths."""
    from dataclasses import replace

    from .. import hub
    from ..pairing.pulls import pull as pull_pair
    from ..pairing.registry import load_registry

    ref = hub.parse_ref(what)
    if ref is not None and "/" in what:
        path = hub.download(replace(ref, quant=quant) if quant else ref)
        console.write_text(f"{path}\n")
        return
    pulled = pull_pair(load_registry(registry).get(what), quant)
    for p in pulled.plan:
        console.note(f"{p.role}: {'already here' if p.cached else 'downloaded'} {p.label}")
    for path in (pulled.target, pulled.draft):
        if path is not None:
            console.write_text(f"{path}\n")


@command()
def models(
    dirs: Annotated[list[Path], typer.Option("--dir", help="Also look in this folder (repeatable; SPECDEC_MODEL_DIRS too).")] = [],  # noqa: B006
    as_json: JsonOpt = False,
    registry: RegistryOpt = None,
) -> None:
    """List the GGUFs on this machine (Hugging Face cache and folders) and the registry pairs they complete."""
    from ..commands.views import models_table
    from ..pairing.models_list import list_local_models
    from ..pairing.registry import load_registry

    found = list_local_models(dirs, load_registry(registry))
    if as_json:
        console.write_json([m.to_dict() for m in found])
    else:
        models_table(found)


# --- generation -----------------------------------------------------------------------------


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
        load=_load_options(ctx, threads, gpu_layers, gpu_layers_draft, margin, flash_attn, cache_type_k, cache_type_v, verbose),
        draft=DraftFlags(draft_max=draft_max, draft_min=draft_min, p_min=draft_p_min),
        registry=registry, yes=yes, no_draft=no_draft, method=plain(method), chat=chat, system=system,
        max_tokens=max_tokens, temp=temp, top_k=top_k, top_p=top_p, seed=seed, stop=tuple(stop),
        verify=plain(verify), force=force, batch=batch, parallel=parallel, as_json=as_json,
        constraint=read_constraint(json_schema, grammar_file, regex), quiet=quiet, show_accept=show_accept,
        explain_divergence=explain_divergence,
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
        load=_load_options(ctx, threads, gpu_layers, gpu_layers_draft, margin, flash_attn, cache_type_k, cache_type_v, verbose),
        draft=DraftFlags(draft_max=draft_max), registry=registry, yes=yes, no_draft=no_draft, method=plain(method),
        host=host, port=port, parallel=parallel, api_key=api_key, model_alias=model_alias, max_tokens=max_tokens,
        quiet=quiet,
    )
    raise typer.Exit(serve_pair(req))


@command()
def budget(
    target: TargetFileOpt,
    draft: Annotated[Optional[Path], typer.Option("--draft", "-d", help="Draft GGUF.")] = None,
    ctx: CtxOpt = 4096,
    gpu_layers: NglOpt = "auto",
    gpu_layers_draft: NgldOpt = "auto",
    margin: MarginOpt = 1.0,
    draft_max: Annotated[Optional[int], typer.Option("--draft-max", min=1, max=64, help="Draft length (sizes the target's output buffer and a hybrid target's snapshots; default: what run uses).")] = None,
    flash_attn: FlashAttnOpt = FlashAttn.AUTO,
    cache_type_k: CacheTypeKOpt = CacheType.F16,
    cache_type_v: CacheTypeVOpt = CacheType.F16,
    method: RunMethodOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Say whether a target (+ draft) fits in memory, per device, before loading anything. Exit 0 fits, 1 not."""
    from ..commands.budget import BudgetRequest, run_budget

    req = BudgetRequest(
        target=target, draft=draft, ctx=ctx, gpu_layers=gpu_layers, gpu_layers_draft=gpu_layers_draft, margin=margin,
        draft_max=draft_max, flash_attn=plain(flash_attn), cache_type_k=plain(cache_type_k),
        cache_type_v=plain(cache_type_v), method=plain(method), as_json=as_json,
    )
    raise typer.Exit(run_budget(req))


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
) -> None:
    """Measure speculation on against off on fixed prompt sets, per use case, and recommend settings."""
    from ..commands.bench import BenchRequest, run_bench_request
    from ..pairing.plan import ModelChoice
    from ..terminal.constraint_args import read_constraint

    req = BenchRequest(
        models=ModelChoice(pair=pair, target=target, draft=draft, quant=quant),
        load=_load_options(ctx, threads, gpu_layers, gpu_layers_draft, margin, flash_attn, cache_type_k, cache_type_v, verbose),
        registry=registry, yes=yes, scenarios=scenarios, prompts=prompts, chat=chat, repeats=repeats,
        max_tokens=max_tokens, draft_max=draft_max, p_min=p_min, json_out=json_out, plot=plot, save=save,
        temp=temp, verify=tuple(plain(v) for v in verify), seed=seed, parallel=parallel,
        constraint=read_constraint(json_schema, grammar_file, regex),
    )
    raise typer.Exit(run_bench_request(req))


@command("export")
def export_cmd(
    to: Annotated[str, typer.Option("--to", help="llama-server, vllm or sglang.")],
    pair: PairOpt = None,
    target: Annotated[Optional[str], typer.Option("--target", "-t", help="Target GGUF path (or checkpoint for vLLM/SGLang).")] = None,
    draft: Annotated[Optional[str], typer.Option("--draft", "-d", help="Draft GGUF path (or checkpoint).")] = None,
    draft_max: Annotated[Optional[int], typer.Option("--draft-max", min=1, max=64, help="Override the draft length.")] = None,
    draft_min: Annotated[Optional[int], typer.Option("--draft-min", min=0, help="Override the minimum draft length.")] = None,
    draft_p_min: Annotated[Optional[float], typer.Option("--draft-p-min", min=0.0, max=1.0, help="Override p-min.")] = None,
    ctx: Annotated[Optional[int], typer.Option("--ctx", "-c", min=16, help="Context size for the server.")] = None,
    gpu_layers: Annotated[Optional[int], typer.Option("-ngl", "--gpu-layers", min=-1, help="Target GPU layers (llama-server).")] = None,
    gpu_layers_draft: Annotated[Optional[int], typer.Option("-ngld", "--gpu-layers-draft", min=-1, help="Draft GPU layers (llama-server).")] = None,
    tensor_parallel: Annotated[Optional[int], typer.Option("--tensor-parallel-size", "-tp", min=1, help="GPUs to shard over (vLLM/SGLang).")] = None,
    target_repo: Annotated[Optional[str], typer.Option("--target-repo", help="The target's Hugging Face checkpoint (vLLM/SGLang load those, not GGUF).")] = None,
    draft_repo: Annotated[Optional[str], typer.Option("--draft-repo", help="The draft's Hugging Face checkpoint (vLLM/SGLang).")] = None,
    as_json: JsonOpt = False,
    registry: RegistryOpt = None,
) -> None:
    """Print a ready-to-run llama-server, vLLM or SGLang command for the same pair and settings."""
    from ..commands.export import ServerOptions, export_pair
    from ..pairing.plan import DraftFlags, ModelChoice

    out = export_pair(
        to, ModelChoice(pair=pair, target=target, draft=draft), registry=registry,
        flags=DraftFlags(draft_max=draft_max, draft_min=draft_min, p_min=draft_p_min),
        server=ServerOptions(ctx=ctx, gpu_layers=gpu_layers, gpu_layers_draft=gpu_layers_draft,
                             tensor_parallel=tensor_parallel, target_repo=target_repo, draft_repo=draft_repo),
    )
    if as_json:
        console.write_json(out.to_dict())
        return
    console.write_text(out.command_line() + "\n")
    for n in out.notes:
        console.note(f"note: {n}")


@command()
def demo(
    max_tokens: Annotated[int, typer.Option("-n", "--max-tokens", min=1, help="Tokens to generate in each run.")] = 128,
) -> None:
    """Fetch a small real pair (once) and measure the target alone, the draft model and auto, on new code and on an edit."""
    from ..commands.demo import run_demo

    raise typer.Exit(run_demo(max_tokens=max_tokens))
