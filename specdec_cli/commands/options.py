"""Command-line options that several commands take, declared once as ``Annotated`` aliases.

A command writes ``ctx: Ctx = 4096``; the flag's names, bounds and help live here, so
``run``, ``bench`` and ``budget`` cannot drift apart.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..models.methods import Choice, Method, RunMethod, VerifyMode

FlashAttn = Choice("FlashAttn", {v.upper(): v for v in ("auto", "on", "off")})
CacheType = Choice("CacheType", {v.upper(): v for v in ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1")})

# the models
PairOpt = Annotated[Optional[str], typer.Option("--pair", "-p", help="A registry pair name (specdec pairs).")]
TargetOpt = Annotated[Optional[str], typer.Option("--target", "-t", help="Target GGUF path (or hf:// reference).")]
DraftOpt = Annotated[Optional[str], typer.Option("--draft", "-d", help="Draft GGUF path (or hf:// reference).")]
RegistryOpt = Annotated[Optional[Path], typer.Option("--registry", help="Extra pairs.toml to merge over the built-in and user registries.")]
QuantOpt = Annotated[Optional[str], typer.Option("--quant", help="Quant of the target to use or fetch, e.g. Q4_K_M (default: the pair's).")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Download missing files without asking.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout instead of a table.")]

# how they load
CtxOpt = Annotated[int, typer.Option("--ctx", "-c", min=16, help="Context size in tokens.")]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", min=1, help="CPU threads (default: physical cores).")]
NglOpt = Annotated[str, typer.Option("-ngl", "--gpu-layers", help="Target layers on the GPU: auto (the most that fit), all, or a number.")]
NgldOpt = Annotated[str, typer.Option("-ngld", "--gpu-layers-draft", help="Draft layers on the GPU: auto, all, or a number.")]
MarginOpt = Annotated[float, typer.Option("--margin", min=0.0, help="GiB to keep free on each GPU when choosing the offload.")]
FlashAttnOpt = Annotated[FlashAttn, typer.Option("--flash-attn", help="Flash attention.")]
CacheTypeKOpt = Annotated[CacheType, typer.Option("--cache-type-k", help="KV cache type for K.")]
CacheTypeVOpt = Annotated[CacheType, typer.Option("--cache-type-v", help="KV cache type for V.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", help="Show llama.cpp's own log.")]
PromptCacheOpt = Annotated[Optional[Path], typer.Option("--prompt-cache", metavar="DIR", help="Keep long prompts' cells in DIR across runs and restarts (default: ~/.cache/specdec/prompts).")]
PromptCacheSizeOpt = Annotated[Optional[str], typer.Option("--prompt-cache-size", metavar="SIZE", help="Most disk the prompt cache takes, least recently used out first, e.g. 10G or 500M (default 10G).")]
NoPromptCacheOpt = Annotated[bool, typer.Option("--no-prompt-cache", help="Keep no prompt's cells past its sequence (RAM and disk); read every prompt.")]
ProfileOpt = Annotated[bool, typer.Option("--profile", help="At the end, where the passes' time went: llama_decode and each host stage, per pass and as a share (stderr; run: --batch).")]

# what is generated
MaxTokensOpt = Annotated[int, typer.Option("-n", "--max-tokens", min=1, help="Most tokens to generate.")]
TempOpt = Annotated[float, typer.Option("--temp", min=0.0, help="Temperature; 0 = greedy.")]
MethodFilterOpt = Annotated[Optional[Method], typer.Option("--method", help="Only this method.")]
RunMethodOpt = Annotated[Optional[RunMethod], typer.Option(
    "--method", help="Drafting method. Default auto: per step, n-gram lookup, the draft model or none, whichever the "
    "measured costs say is fastest (draft heads run as themselves). Or force draft, eagle3, dflash, dspark or ngram "
    "(fixed-length llama.cpp-style drafting).")]
ParallelOpt = Annotated[Optional[int], typer.Option(
    "--parallel", min=1, help="Prompts decoded at once (--batch; serve: requests). Default: as many as the "
    "measured cost of a pass says pay, within memory.")]
VerifyOpt = Annotated[VerifyMode, typer.Option(
    "--verify", help="At --temp > 0: exact (speculative sampling), match (llama.cpp's sample-then-match), "
    "or auto (exact where the drafter samples).")]


def verify_list(text: str) -> list[VerifyMode]:
    """``bench --verify exact,match``: each name checked at parse time against the verify rules."""
    names = [v.strip() for v in text.split(",") if v.strip()] or ["auto"]
    bad = [n for n in names if n not in VerifyMode.values()]
    if bad:
        raise typer.BadParameter(f"{bad[0]!r} is not one of {', '.join(map(repr, VerifyMode.values()))}")
    return [VerifyMode(n) for n in names]


def plain(value):
    """An option's value without its enum wrapper, for the library."""
    return value.value if isinstance(value, Enum) else value
