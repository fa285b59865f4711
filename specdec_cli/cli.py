"""The ``specdec`` command line: one thin function per command over the library.

Conventions every command follows: stdout carries only the generated text (or JSON with
``--json``); notes, warnings and the summary go to stderr; foreseen failures print one
``error:`` line and exit non-zero (2 for bad input, 1 for a request that cannot be done,
130 for Ctrl-C).
"""

from __future__ import annotations

import functools
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from . import console, interrupts
from .errors import EXIT_USAGE, SpecdecError

app = typer.Typer(
    name="specdec",
    help="Speculative decoding with llama.cpp: pair a target GGUF with a draft, check it fits, run it, measure it.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

FlashAttn = Enum("FlashAttn", {v: v for v in ("auto", "on", "off")}, type=str)
CacheType = Enum("CacheType", {v: v for v in ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1")}, type=str)

NglOpt = typer.Option("auto", "-ngl", "--gpu-layers", help="Target layers on the GPU: auto (the most that fit), all, or a number.")
NgldOpt = typer.Option("auto", "-ngld", "--gpu-layers-draft", help="Draft layers on the GPU: auto, all, or a number.")
MarginOpt = typer.Option(1.0, "--margin", min=0.0, help="GiB to keep free on each GPU when choosing the offload.")
QuantOpt = typer.Option(None, "--quant", help="Quant of the target to use or fetch, e.g. Q4_K_M (default: the pair's).")
YesOpt = typer.Option(False, "--yes", "-y", help="Download missing files without asking.")
RegistryOpt = typer.Option(None, "--registry", help="Extra pairs.toml to merge over the built-in and user registries.")
JsonOpt = typer.Option(False, "--json", help="Print JSON on stdout instead of a table.")


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


# --- registry and metadata ------------------------------------------------------------------


@command()
def pairs(
    method: Optional[str] = typer.Option(None, "--method", help="Only this method: draft, eagle3, dflash, dspark, ngram."),
    target: Optional[str] = typer.Option(None, "--target", help="Only entries whose target matches this text."),
    as_json: bool = JsonOpt,
    registry: Optional[Path] = RegistryOpt,
) -> None:
    """List the registry of target/draft pairs."""
    from .registry import load_registry
    from .views import pairs_table

    entries = load_registry(registry).filter(method=method, target=target)
    if as_json:
        console.write_json([e.to_dict() for e in entries])
    else:
        pairs_table(entries)


@command()
def inspect(
    file: Path = typer.Argument(..., help="A GGUF file."),
    as_json: bool = JsonOpt,
) -> None:
    """Show a GGUF's metadata (architecture, sizes, vocabulary, chat template, draft method) without loading weights."""
    from .gguf_meta import read_gguf
    from .views import info_table

    info = read_gguf(file)
    if as_json:
        console.write_json(info.to_dict())
    else:
        info_table(info)


@command()
def check(
    target: Path = typer.Option(..., "--target", "-t", help="Target GGUF."),
    draft: Path = typer.Option(..., "--draft", "-d", help="Draft GGUF."),
    as_json: bool = JsonOpt,
) -> None:
    """Say whether a draft can serve a target, before loading any weights. Exit 0 compatible, 1 not, 2 usage error."""
    from .compat import check_pair
    from .gguf_meta import read_gguf
    from .views import verdict_table

    tinfo, dinfo = read_gguf(target), read_gguf(draft)
    verdict = check_pair(tinfo, dinfo, method=dinfo.spec_method or "draft")
    if as_json:
        console.write_json(verdict.to_dict())
    else:
        verdict_table(verdict, tinfo, dinfo)
    raise typer.Exit(0 if verdict.ok else 1)


# --- models on this machine ------------------------------------------------------------------


@command()
def pull(
    what: str = typer.Argument(..., help="A registry pair name, or a model reference: hf://org/repo/file.gguf, org/repo:Q4_K_M."),
    quant: Optional[str] = QuantOpt,
    registry: Optional[Path] = RegistryOpt,
) -> None:
    """Download a pair's target and draft GGUFs (or one model) into the Hugging Face cache; print their paths."""
    from dataclasses import replace

    from . import hub
    from .registry import load_registry

    ref = hub.parse_ref(what)
    if ref is not None and "/" in what:
        path = hub.download(replace(ref, quant=quant) if quant else ref)
        console.write_text(f"{path}\n")
        return
    pulled = hub.pull(load_registry(registry).get(what), quant)
    for p in pulled.plan:
        console.note(f"{p.role}: {'already here' if p.cached else 'downloaded'} {p.label}")
    for path in (pulled.target, pulled.draft):
        if path is not None:
            console.write_text(f"{path}\n")


@command()
def models(
    dirs: list[Path] = typer.Option([], "--dir", help="Also look in this folder (repeatable; SPECDEC_MODEL_DIRS too)."),
    as_json: bool = JsonOpt,
    registry: Optional[Path] = RegistryOpt,
) -> None:
    """List the GGUFs on this machine (Hugging Face cache and folders) and the registry pairs they complete."""
    from .models_list import list_local_models
    from .registry import load_registry
    from .views import models_table

    found = list_local_models(dirs, load_registry(registry))
    if as_json:
        console.write_json([m.to_dict() for m in found])
    else:
        models_table(found)


# --- generation -----------------------------------------------------------------------------


@command()
def run(
    prompt: Optional[str] = typer.Argument(None, help="The prompt. Or use -f FILE, or pipe it on stdin."),
    file: Optional[Path] = typer.Option(None, "-f", "--file", help="Read the prompt from FILE."),
    pair: Optional[str] = typer.Option(None, "--pair", "-p", help="A registry pair name (specdec pairs)."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target GGUF path."),
    draft: Optional[str] = typer.Option(None, "--draft", "-d", help="Draft GGUF path."),
    no_draft: bool = typer.Option(False, "--no-draft", help="Run the target alone (the baseline)."),
    chat: bool = typer.Option(False, "--chat", help="Apply the target's chat template."),
    system: Optional[str] = typer.Option(None, "--system", help="System message (with --chat)."),
    max_tokens: int = typer.Option(256, "-n", "--max-tokens", min=1, help="Most tokens to generate."),
    temp: float = typer.Option(0.0, "--temp", min=0.0, help="Temperature; 0 = greedy."),
    top_k: int = typer.Option(40, "--top-k", min=0, help="Top-k sampling (0 = off)."),
    top_p: float = typer.Option(0.95, "--top-p", min=0.0, max=1.0, help="Top-p sampling (1 = off)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Sampling seed (random if unset; reported in --json)."),
    stop: list[str] = typer.Option([], "--stop", help="Stop at this string (repeatable)."),
    ctx: int = typer.Option(4096, "--ctx", "-c", min=16, help="Context size in tokens."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads (default: physical cores)."),
    gpu_layers: str = NglOpt,
    gpu_layers_draft: str = NgldOpt,
    margin: float = MarginOpt,
    force: bool = typer.Option(False, "--force", help="Run even if the memory check says it does not fit."),
    draft_max: Optional[int] = typer.Option(None, "--draft-max", min=1, max=64, help="Most tokens drafted per step."),
    draft_min: Optional[int] = typer.Option(None, "--draft-min", min=0, help="Drop drafts shorter than this."),
    draft_p_min: Optional[float] = typer.Option(None, "--draft-p-min", min=0.0, max=1.0, help="Stop drafting below this draft confidence."),
    flash_attn: FlashAttn = typer.Option(FlashAttn.auto, "--flash-attn", help="Flash attention."),
    cache_type_k: CacheType = typer.Option(CacheType.f16, "--cache-type-k", help="KV cache type for K."),
    cache_type_v: CacheType = typer.Option(CacheType.f16, "--cache-type-v", help="KV cache type for V."),
    batch: Optional[Path] = typer.Option(None, "--batch", help="JSONL (prompt / messages per line) or plain lines: one JSON result per line on stdout."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (text, tokens, timings, counts) instead of the text."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary on stderr."),
    show_accept: bool = typer.Option(False, "--show-accept", help="Colour the tokens the draft proposed (terminal only)."),
    explain_divergence: bool = typer.Option(False, "--explain-divergence", help="Also run without the draft and show where (and why) the outputs differ."),
    verbose: bool = typer.Option(False, "--verbose", help="Show llama.cpp's own log."),
    registry: Optional[Path] = RegistryOpt,
    quant: Optional[str] = QuantOpt,
    yes: bool = YesOpt,
    method: Optional[str] = typer.Option(None, "--method", help="Drafting method. Default auto: per step, n-gram lookup, the draft model or none, "
    "whichever the measured costs say is fastest (draft heads run as themselves). Or force draft, eagle3, dflash, dspark "
    "or ngram (fixed-length llama.cpp-style drafting)."),
    verify: str = typer.Option("auto", "--verify", help="At --temp > 0: exact (speculative sampling), match (llama.cpp's sample-then-match), or auto (exact where the drafter samples)."),
) -> None:
    """Generate with speculative decoding (or the target alone with --no-draft)."""
    from .run_command import RunRequest, run_request

    args = {k: v.value if isinstance(v, Enum) else v for k, v in locals().items()}
    req = RunRequest(**{k: v for k, v in args.items() if k in RunRequest.__dataclass_fields__})
    code = run_request(req)
    raise typer.Exit(code)


@command()
def budget(
    target: Path = typer.Option(..., "--target", "-t", help="Target GGUF."),
    draft: Optional[Path] = typer.Option(None, "--draft", "-d", help="Draft GGUF."),
    ctx: int = typer.Option(4096, "--ctx", "-c", min=16, help="Context size in tokens."),
    gpu_layers: str = NglOpt,
    gpu_layers_draft: str = NgldOpt,
    margin: float = MarginOpt,
    draft_max: int = typer.Option(4, "--draft-max", min=1, max=64, help="Draft length (sizes the target's output buffer)."),
    flash_attn: FlashAttn = typer.Option(FlashAttn.auto, "--flash-attn", help="Flash attention."),
    cache_type_k: CacheType = typer.Option(CacheType.f16, "--cache-type-k", help="KV cache type for K."),
    cache_type_v: CacheType = typer.Option(CacheType.f16, "--cache-type-v", help="KV cache type for V."),
    as_json: bool = JsonOpt,
) -> None:
    """Say whether a target (+ draft) fits in memory, per device, before loading anything. Exit 0 fits, 1 not."""
    from .budget import parse_layers, plan, suggestions
    from .gguf_meta import read_gguf
    from .views import budget_table

    tinfo = read_gguf(target)
    dinfo = read_gguf(draft) if draft else None
    est = plan(
        tinfo, dinfo, n_ctx=ctx, cache_type_k=cache_type_k.value, cache_type_v=cache_type_v.value,
        flash_attn=flash_attn.value, draft_max=draft_max, margin_gib=margin,
        ngl_target=parse_layers(gpu_layers, "-ngl"), ngl_draft=parse_layers(gpu_layers_draft, "-ngld"),
    )
    if as_json:
        console.write_json(est.to_dict())
    else:
        budget_table(est)
        if not est.fits:
            for tip in suggestions(est):
                console.note(f"to fit: {tip}")
    raise typer.Exit(0 if est.fits else 1)


@command()
def bench(
    pair: Optional[str] = typer.Option(None, "--pair", "-p", help="A registry pair name."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target GGUF path."),
    draft: Optional[str] = typer.Option(None, "--draft", "-d", help="Draft GGUF path."),
    scenarios: Optional[str] = typer.Option(None, "--scenarios", help="Comma-separated: documents, code, agent, json, qa, creative (default: all)."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Your own prompt set (JSONL: prompt or messages per line)."),
    chat: bool = typer.Option(True, "--chat/--no-chat", help="Apply the chat template to plain prompts."),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Runs of each prompt and setting."),
    max_tokens: int = typer.Option(128, "-n", "--max-tokens", min=1, help="Tokens per generation."),
    draft_max: str = typer.Option("4", "--draft-max", help="Draft lengths to try, e.g. 1,2,4,8,16."),
    p_min: str = typer.Option("0.5", "--p-min", help="Draft confidence thresholds to try, e.g. 0,0.5,0.8."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write every figure, per prompt too, to this file."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Draw tokens/s and speedups to FILE.png or .svg (needs specdec[plot])."),
    save: bool = typer.Option(False, "--save", help="Store the recommended setting for this pair; `run` then uses it."),
    ctx: int = typer.Option(4096, "--ctx", "-c", min=16, help="Context size in tokens."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads."),
    gpu_layers: str = NglOpt,
    gpu_layers_draft: str = NgldOpt,
    margin: float = MarginOpt,
    flash_attn: FlashAttn = typer.Option(FlashAttn.auto, "--flash-attn", help="Flash attention."),
    cache_type_k: CacheType = typer.Option(CacheType.f16, "--cache-type-k", help="KV cache type for K."),
    cache_type_v: CacheType = typer.Option(CacheType.f16, "--cache-type-v", help="KV cache type for V."),
    verbose: bool = typer.Option(False, "--verbose", help="Show llama.cpp's own log."),
    registry: Optional[Path] = RegistryOpt,
    quant: Optional[str] = QuantOpt,
    yes: bool = YesOpt,
    temp: float = typer.Option(0.0, "--temp", min=0.0, help="Temperature (0 = greedy, where outputs are compared)."),
    verify: str = typer.Option("auto", "--verify", help="At --temp > 0, rules to compare, e.g. exact,match."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed at --temp > 0."),
) -> None:
    """Measure speculation on against off on fixed prompt sets, per use case, and recommend settings."""
    from .bench.command import BenchRequest, run_bench_request

    args = {k: v.value if isinstance(v, Enum) else v for k, v in locals().items()}
    req = BenchRequest(**{k: v for k, v in args.items() if k in BenchRequest.__dataclass_fields__})
    raise typer.Exit(run_bench_request(req))


@command("export")
def export_cmd(
    to: str = typer.Option(..., "--to", help="llama-server, vllm or sglang."),
    pair: Optional[str] = typer.Option(None, "--pair", "-p", help="A registry pair name."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target GGUF path (or checkpoint for vLLM/SGLang)."),
    draft: Optional[str] = typer.Option(None, "--draft", "-d", help="Draft GGUF path (or checkpoint)."),
    draft_max: Optional[int] = typer.Option(None, "--draft-max", min=1, max=64, help="Override the draft length."),
    draft_min: Optional[int] = typer.Option(None, "--draft-min", min=0, help="Override the minimum draft length."),
    draft_p_min: Optional[float] = typer.Option(None, "--draft-p-min", min=0.0, max=1.0, help="Override p-min."),
    ctx: Optional[int] = typer.Option(None, "--ctx", "-c", min=16, help="Context size for the server."),
    gpu_layers: Optional[int] = typer.Option(None, "-ngl", "--gpu-layers", min=-1, help="Target GPU layers (llama-server)."),
    gpu_layers_draft: Optional[int] = typer.Option(None, "-ngld", "--gpu-layers-draft", min=-1, help="Draft GPU layers (llama-server)."),
    tensor_parallel: Optional[int] = typer.Option(None, "--tensor-parallel-size", "-tp", min=1, help="GPUs to shard over (vLLM/SGLang)."),
    target_repo: Optional[str] = typer.Option(None, "--target-repo", help="The target's Hugging Face checkpoint (vLLM/SGLang load those, not GGUF)."),
    draft_repo: Optional[str] = typer.Option(None, "--draft-repo", help="The draft's Hugging Face checkpoint (vLLM/SGLang)."),
    as_json: bool = JsonOpt,
    registry: Optional[Path] = RegistryOpt,
) -> None:
    """Print a ready-to-run llama-server, vLLM or SGLang command for the same pair and settings."""
    from .export_command import export_pair

    out = export_pair(
        to, pair=pair, target=target, draft=draft, registry=registry, draft_max=draft_max, draft_min=draft_min,
        p_min=draft_p_min, ctx=ctx, gpu_layers=gpu_layers, gpu_layers_draft=gpu_layers_draft,
        tensor_parallel=tensor_parallel, target_repo=target_repo, draft_repo=draft_repo,
    )
    if as_json:
        console.write_json(out.to_dict())
        return
    console.write_text(out.command_line() + "\n")
    for n in out.notes:
        console.note(f"note: {n}")


@command()
def demo(
    max_tokens: int = typer.Option(128, "-n", "--max-tokens", min=1, help="Tokens to generate in each run."),
) -> None:
    """Fetch a small real pair (once) and measure the target alone, the draft model and auto, on new code and on an edit."""
    from .demo import run_demo

    raise typer.Exit(run_demo(max_tokens=max_tokens))


# --- entry point ----------------------------------------------------------------------------


def _click_class(name: str) -> type:
    """Click's exception classes, whether typer vendors click (0.2x) or depends on it."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


_ClickUsageError = _click_class("UsageError")
_ClickException = _click_class("ClickException")


def main(argv: list[str] | None = None) -> int:
    """Run the app, turning every foreseen failure into one line on stderr and an exit code."""
    args = sys.argv[1:] if argv is None else argv
    with interrupts.handled(), console.guarded_stdout():
        try:
            return _run_app(args)
        except BrokenPipeError:
            # the reader went away (`specdec run ... | head`): not an error worth a traceback
            console.silence_stdout()
            return 0


def _run_app(args: list[str]) -> int:
    try:
        code = app(args=args, prog_name="specdec", standalone_mode=False)
        return code if isinstance(code, int) else 0  # typer.Exit(n) comes back as n here
    except typer.Exit as exc:
        return exc.exit_code
    except _Escaped as exc:
        console.error_line("interrupted")
        return interrupts.exit_code(exc.interrupt)
    except typer.Abort:  # click's form of an end of input or a signal while it parsed
        console.error_line("interrupted")
        return interrupts.exit_code()
    except _ClickUsageError as exc:
        cmd = exc.ctx.command_path if exc.ctx else "specdec"
        console.error_line(f"{exc.format_message()} (see `{cmd} --help`)")
        return EXIT_USAGE
    except _ClickException as exc:
        console.error_line(exc.format_message())
        return exc.exit_code
    except SpecdecError as exc:
        console.error_line(exc.one_line())
        return exc.exit_code
    except KeyboardInterrupt as exc:
        console.error_line("interrupted")
        return interrupts.exit_code(exc)
