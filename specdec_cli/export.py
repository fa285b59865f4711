"""Hand a tuned pair to a serving engine: llama-server, vLLM or SGLang.

``export(spec, engine)`` turns the settings ``specdec run`` would use (the stored bench
recommendation, else the registry entry's, else specdec's defaults; the caller resolves
them into an :class:`ExportSpec`) into a ready-to-run command line for another engine,
spelled the way that engine spells it. Settings the engine has no equivalent for are left
out of the command and named in ``Export.notes``; a combination the engine cannot run is
refused with a :class:`~specdec_cli.errors.SpecdecError` (exit 1) that says what would work.
The rule is: never emit a command that would fail.

What the engines load
---------------------
* **llama-server** loads GGUF files: ``spec.target`` and ``spec.draft`` must be ``.gguf``
  paths. EAGLE-3, DFlash and DSpark drafts are published as Hugging Face checkpoints and
  must be converted first (llama.cpp's ``convert_hf_to_gguf.py --target-model-dir``); a
  draft known only by its repo id is refused with that hint.
* **vLLM** and **SGLang** load Hugging Face checkpoints (safetensors folders or repo ids).
  vLLM's GGUF support is experimental and does not cover EAGLE-3/DFlash/DSpark heads, and
  SGLang's speculative paths expect checkpoints too, so a GGUF is never emitted for them.
  The target is ``spec.target_repo`` when given, else ``spec.target`` when that is not a
  GGUF (a repo id or a checkpoint folder); the draft likewise from ``spec.draft_repo`` /
  ``spec.draft``. For EAGLE-3/DFlash/DSpark the registry's ``draft_repo`` *is* the
  checkpoint these engines load. The registry's ``target_repos`` and the classic drafts'
  ``draft_repo`` are GGUF repos (``...-GGUF``): with nothing else the export is refused,
  asking for the checkpoint the GGUF was converted from. When a GGUF path was given and a
  checkpoint is emitted instead, a note says so (the engine serves the checkpoint's own
  weights, e.g. BF16, not the GGUF's quantization, so memory needs differ).

Where each spelling comes from
------------------------------
* llama-server: ``common/arg.cpp`` and ``common/speculative.cpp`` of the llama.cpp vendored
  in llama-cpp-python 0.3.36 (also ``tools/server/README.md`` and ``docs/speculative.md``
  there; https://github.com/ggml-org/llama.cpp/blob/master/docs/speculative.md).
* vLLM: ``vllm/config/speculative.py`` and ``vllm/engine/arg_utils.py`` of vLLM 0.34.0
  (PyPI); https://docs.vllm.ai/en/latest/features/speculative_decoding/ (draft_model/,
  n_gram/, eagle/ pages).
* SGLang: ``sglang/srt/arg_groups/fields/spec.py``, ``.../speculative_hook.py`` and
  ``sglang/srt/speculative/spec_info.py`` of SGLang 0.5.23 (PyPI);
  https://docs.sglang.io/docs/advanced_features/speculative_decoding
Older releases of vLLM and SGLang may lack DFlash or DSpark.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import SpecdecError, UsageError
from .registry import METHODS  # draft | eagle3 | dflash | dspark | ngram

__all__ = ["ENGINES", "METHODS", "NGRAM_MATCH", "ExportSpec", "Export", "export"]

ENGINES = ("llama-server", "vllm", "sglang")

# The n-gram sizes specdec run's prompt lookup matches, longest first, before copying what
# followed (engine/drafters/ngram.py, NgramDrafter(n_min=2, n_max_match=4)).
NGRAM_MATCH = (2, 4)

_ENGINE_NAMES = {"llama-server": "llama-server", "vllm": "vLLM", "sglang": "SGLang"}
_METHOD_NAMES = {
    "draft": "a classic draft model",
    "eagle3": "EAGLE-3",
    "dflash": "DFlash",
    "dspark": "DSpark",
    "ngram": "n-gram lookup",
}
_SOURCES = {
    "bench": "the stored bench recommendation",
    "registry": "the registry entry",
    "defaults": "specdec's defaults",
    "flags": "the command-line flags",
}

# --- the engines' spellings of each method ----------------------------------------------
#
# llama-server --spec-type values: common/speculative.cpp, the name table at the top
# ("draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark", "ngram-simple", ...),
# also listed in tools/server/README.md under --spec-type. specdec's "ngram" (copy what
# followed the last earlier occurrence of the last few tokens) is llama.cpp's
# "ngram-simple" ("looks for the last n-gram in history that matches the current n-gram
# and creates a draft using the m tokens following the matched n-gram", docs/speculative.md).
_LLAMA_SPEC_TYPE = {
    "draft": "draft-simple",
    "eagle3": "draft-eagle3",
    "dflash": "draft-dflash",
    "dspark": "draft-dspark",
    "ngram": "ngram-simple",
}
# vLLM speculative_config "method": vllm/config/speculative.py, SpeculativeMethod =
# Literal["ngram", "draft_model", "suffix", "eagle", "eagle3", ..., "dflash", "ngram_gpu",
# "dspark"] (0.34.0). Docs: draft_model/ ("method": "draft_model"), n_gram/ ("method":
# "ngram"), eagle/ ("method": "eagle3").
_VLLM_METHOD = {
    "draft": "draft_model",
    "eagle3": "eagle3",
    "dflash": "dflash",
    "dspark": "dspark",
    "ngram": "ngram",
}
# SGLang --speculative-algorithm: sglang/srt/speculative/spec_info.py, enum
# SpeculativeAlgorithm {DFLASH, UNO, DSPARK, EAGLE, EAGLE3, FROZEN_KV_MTP, STANDALONE,
# NGRAM}; the docs' method table: EAGLE3, STANDALONE ("You have a smaller draft LLM"),
# NGRAM, DFLASH.
_SGLANG_ALGORITHM = {
    "draft": "STANDALONE",
    "eagle3": "EAGLE3",
    "dflash": "DFLASH",
    "dspark": "DSPARK",
    "ngram": "NGRAM",
}
_SPELLINGS = {"llama-server": _LLAMA_SPEC_TYPE, "vllm": _VLLM_METHOD, "sglang": _SGLANG_ALGORITHM}


# --------------------------------------------------------------------------- data


@dataclass
class ExportSpec:
    """Everything an export needs, resolved by the caller (registry, bench store, flags).

    ``target``/``draft`` are what ``specdec run`` loads: GGUF paths (or, for vLLM/SGLang
    only, a Hugging Face repo id or checkpoint folder). ``target_repo``/``draft_repo`` name
    the Hugging Face checkpoints vLLM and SGLang load; pass the registry entry's
    ``draft_repo`` as is (a GGUF repo is recognised and not used for those engines).

    ``gpu_layers``/``gpu_layers_draft``: None leaves the engine's default, a negative
    number means all layers (specdec's -1); ``gpu_layers_draft`` None follows
    ``gpu_layers``, as in ``specdec run``.

    The optional facts below let the export refuse or adjust what would otherwise fail;
    read them from the GGUFs when at hand (``read_gguf(p).n_vocab``, and for a DFlash/DSpark
    draft its ``kv["dflash.block_size"]`` and ``kv["dflash.has_confidence_head"]``).
    """

    method: str  # draft | eagle3 | dflash | dspark | ngram
    target: str
    draft: str | None
    draft_max: int
    draft_min: int
    p_min: float
    ctx: int | None = None
    gpu_layers: int | None = None
    gpu_layers_draft: int | None = None
    tensor_parallel: int | None = None
    settings_source: str = "defaults"  # "bench", "registry", "defaults", "flags"
    target_repo: str | None = None  # HF checkpoint of the target (vLLM/SGLang)
    draft_repo: str | None = None  # HF checkpoint of the draft (vLLM/SGLang)
    target_n_vocab: int | None = None  # vocabulary sizes: vLLM/SGLang need them equal
    draft_n_vocab: int | None = None  # for a classic draft (llama.cpp allows 128 apart)
    draft_block_size: int | None = None  # DFlash/DSpark trained block size
    draft_has_confidence_head: bool | None = None  # DSpark: p-min needs the head
    ngram_min: int | None = None  # n-gram sizes matched, None = run's (NGRAM_MATCH)
    ngram_max: int | None = None


@dataclass
class Export:
    """A command line for one engine, and what did not carry over (``notes``)."""

    engine: str
    argv: list[str]
    notes: list[str] = field(default_factory=list)
    method: str = ""
    speculative_config: dict[str, Any] | None = None  # vLLM: the --speculative-config object

    def command_line(self) -> str:
        """The command, shell-quoted, ready to paste."""
        return shlex.join(self.argv)

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "method": self.method,
            "command": self.command_line(),
            "argv": list(self.argv),
            "speculative_config": dict(self.speculative_config) if self.speculative_config else None,
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------- entry point


def export(spec: ExportSpec, engine: str) -> Export:
    """The command that runs ``spec`` on ``engine`` (one of ENGINES).

    Raises UsageError for an unknown engine or malformed settings, SpecdecError (exit 1)
    for a method the engine lacks (the hint names engines that have it) or a pair the
    engine cannot load as given.
    """
    key = (engine or "").strip().lower()
    if key not in ENGINES:
        raise UsageError(f"unknown engine '{engine}'", hint=f"use one of: {', '.join(ENGINES)}")
    _validate(spec)
    if spec.method not in _SPELLINGS[key]:
        others = [e for e in ENGINES if spec.method in _SPELLINGS[e]]
        hint = (f"export it to {' or '.join(others)} instead" if others
                else "no supported engine runs it; use specdec run")
        raise SpecdecError(f"{_ENGINE_NAMES[key]} has no {_METHOD_NAMES[spec.method]} speculative decoding",
                           hint=hint)
    notes = [_source_note(spec)]
    n_draft = _draft_len(spec, key, notes)
    if spec.method == "ngram" and spec.draft:
        notes.append(f"draft {spec.draft} dropped: n-gram lookup uses no draft model")
    if key == "llama-server":
        out = _llama_server(spec, n_draft, notes)
    elif key == "vllm":
        out = _vllm(spec, n_draft, notes)
    else:
        out = _sglang(spec, n_draft, notes)
    out.method = spec.method
    return out


# --------------------------------------------------------------------------- engines


def _llama_server(spec: ExportSpec, n: int, notes: list[str]) -> Export:
    # -m/--model, -md/--model-draft (canonical --spec-draft-model), --spec-type,
    # --spec-draft-n-max, --spec-draft-n-min, --spec-draft-p-min (alias --draft-p-min),
    # -ngl/--gpu-layers, -ngld (canonical --spec-draft-ngl), -c/--ctx-size: common/arg.cpp.
    # (The older --draft/--draft-max/--draft-min are removed there and now fail.)
    target = _gguf_for_llama("target", spec.target, None)
    argv = ["llama-server", "-m", target]
    if spec.method == "ngram":
        # ngram-simple drafts --spec-ngram-simple-size-m tokens after a match of
        # --spec-ngram-simple-size-n tokens (common/speculative.cpp: its n_max is
        # ngram_simple.size_m; --spec-draft-n-max does not apply to it). It proposes
        # nothing unless size-n <= size-m (common/ngram-map.cpp, copy_max < size_n).
        # It matches one size: the shortest of run's, so it drafts wherever run would.
        lo, hi = _ngram_sizes(spec)
        look = min(lo, n)
        if look != lo:
            notes.append(f"n-gram size lowered from {lo} to {n}: llama-server's ngram-simple drafts nothing "
                         "when the matched n-gram is longer than the draft")
        if hi > look:
            notes.append(f"llama-server's ngram-simple matches {look}-grams only (specdec tries {hi} down to {lo})")
        argv += ["--spec-type", "ngram-simple",
                 "--spec-ngram-simple-size-n", str(look), "--spec-ngram-simple-size-m", str(n)]
        _drop_ngram_extras(spec, notes, "llama-server")
    else:
        draft = _gguf_for_llama("draft", spec.draft, spec.draft_repo)
        p_min = spec.p_min
        if spec.method == "dspark" and p_min > 0 and spec.draft_has_confidence_head is False:
            # common/speculative.cpp: "DSpark draft has no confidence head: please set
            # --spec-draft-p-min 0" (thrown when dflash.has_confidence_head is false).
            notes.append(f"p-min {_num(p_min)} dropped to 0: llama-server applies p-min to DSpark through "
                         "the draft's confidence head, and this draft has none")
            p_min = 0.0
        n_min = min(spec.draft_min, n)
        if n_min != spec.draft_min:
            notes.append(f"draft-min lowered from {spec.draft_min} to {n_min}, the draft length")
        argv += ["-md", draft, "--spec-type", _LLAMA_SPEC_TYPE[spec.method],
                 "--spec-draft-n-max", str(n), "--spec-draft-n-min", str(n_min),
                 "--spec-draft-p-min", _num(p_min)]
        if spec.method == "dspark" and p_min > 0 and spec.draft_has_confidence_head is None:
            notes.append("llama-server refuses to start a DSpark draft converted without a confidence head "
                         "(dflash.has_confidence_head = false) unless --spec-draft-p-min is 0")
    if spec.gpu_layers is not None:
        argv += ["-ngl", _ngl(spec.gpu_layers)]
    if spec.method != "ngram":
        ngld = spec.gpu_layers_draft if spec.gpu_layers_draft is not None else spec.gpu_layers
        if ngld is not None:
            argv += ["-ngld", _ngl(ngld)]
    elif spec.gpu_layers_draft is not None:
        notes.append("-ngld dropped: n-gram lookup has no draft model")
    if spec.ctx is not None:
        argv += ["-c", str(spec.ctx)]
    if spec.tensor_parallel is not None:
        notes.append(f"tensor parallel {spec.tensor_parallel} not set: llama-server has no tensor-parallel size; "
                     "it splits the layers over every visible GPU (--split-mode layer, the default; limit them "
                     "with --device) and over other machines with --rpc HOST:PORT,... (rpc-server workers)")
    return Export(engine="llama-server", argv=argv, notes=notes)


def _vllm(spec: ExportSpec, n: int, notes: list[str]) -> Export:
    # `vllm serve MODEL` (positional model_tag), --speculative-config JSON (also -sc),
    # --tensor-parallel-size (-tp), --max-model-len: vllm/engine/arg_utils.py,
    # vllm/entrypoints/common/cli_args.py; the docs' example:
    # vllm serve Qwen/Qwen3-8B --speculative-config '{"model": "Qwen/Qwen3-0.6B",
    #   "num_speculative_tokens": 5, "method": "draft_model"}'  (features/speculative_decoding/draft_model/)
    target = _hf_checkpoint("target", "vllm", spec.target, spec.target_repo, notes)
    config: dict[str, Any] = {"method": _VLLM_METHOD[spec.method]}
    if spec.method == "ngram":
        # prompt_lookup_max / prompt_lookup_min: the n-gram sizes tried, longest first, as run
        # does (SpeculativeConfig fields; docs features/speculative_decoding/n_gram/).
        lo, hi = _ngram_sizes(spec)
        config.update(num_speculative_tokens=n, prompt_lookup_max=hi, prompt_lookup_min=lo)
        _drop_ngram_extras(spec, notes, "vLLM")
    else:
        draft = _hf_checkpoint("draft", "vllm", spec.draft, spec.draft_repo, notes)
        if spec.method == "draft":
            _same_vocab(spec, "vLLM")
        config.update(model=draft, num_speculative_tokens=n)
        _drop_draft_extras(spec, notes, "vLLM", "drafts num_speculative_tokens tokens every step")
    argv = ["vllm", "serve", target, "--speculative-config", json.dumps(config)]
    if spec.tensor_parallel is not None:
        argv += ["--tensor-parallel-size", str(spec.tensor_parallel)]
    if spec.ctx is not None:
        argv += ["--max-model-len", str(spec.ctx)]
    _drop_gpu_layers(spec, notes, "vLLM")
    if spec.method in ("dflash", "dspark"):
        notes.append(f"{_METHOD_NAMES[spec.method]} needs a recent vLLM (checked against 0.34.0)")
    return Export(engine="vllm", argv=argv, notes=notes, speculative_config=config)


def _sglang(spec: ExportSpec, n: int, notes: list[str]) -> Export:
    # python3 -m sglang.launch_server --model-path M (docs' launch form),
    # --speculative-algorithm, --speculative-draft-model-path, --speculative-num-steps,
    # --speculative-eagle-topk, --speculative-num-draft-tokens, --speculative-dspark-block-size:
    # sglang/srt/arg_groups/fields/spec.py; --tp-size (alias --tensor-parallel-size) in
    # fields/parallel.py; --context-length in fields/model.py.
    target = _hf_checkpoint("target", "sglang", spec.target, spec.target_repo, notes)
    algo = _SGLANG_ALGORITHM[spec.method]
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", target, "--speculative-algorithm", algo]
    if spec.method == "ngram":
        # NGRAM: the verify window (the last token plus drafts) is --speculative-num-draft-tokens;
        # drafts come from a suffix trie (speculative_hook.py _handle_ngram; ngram_worker.py).
        argv += ["--speculative-num-draft-tokens", str(n + 1)]
        _drop_ngram_extras(spec, notes, "SGLang", window=False)
        notes.append("SGLang's NGRAM matches suffixes of up to --speculative-ngram-max-trie-depth tokens "
                     "(default 18) and may draft a small tree (--speculative-ngram-max-bfs-breadth, default 10) "
                     "within the verify window")
    else:
        draft = _hf_checkpoint("draft", "sglang", spec.draft, spec.draft_repo, notes)
        if spec.method == "draft":
            _same_vocab(spec, "SGLang")
        argv += ["--speculative-draft-model-path", draft]
        if spec.method in ("draft", "eagle3"):
            # A chain of N drafted tokens: num-steps N, topk 1, num-draft-tokens N + 1
            # (speculative_hook.py _handle_eagle_family resets num-draft-tokens to steps + 1
            # when topk is 1; topk must be given once num-steps is).
            argv += ["--speculative-num-steps", str(n), "--speculative-eagle-topk", "1",
                     "--speculative-num-draft-tokens", str(n + 1)]
        elif spec.method == "dflash":
            # DFLASH runs one block of --speculative-num-draft-tokens (the anchor plus N
            # drafts); num-steps and topk are forced to 1 (_handle_dflash).
            argv += ["--speculative-num-draft-tokens", str(n + 1)]
        else:
            # DSPARK: gamma = --speculative-dspark-block-size drafted tokens, and
            # --speculative-num-draft-tokens must equal gamma + 1 (_handle_dspark).
            argv += ["--speculative-dspark-block-size", str(n), "--speculative-num-draft-tokens", str(n + 1)]
        _drop_draft_extras(spec, notes, "SGLang", "verifies the whole draft every step")
    if spec.tensor_parallel is not None:
        argv += ["--tp-size", str(spec.tensor_parallel)]
    if spec.ctx is not None:
        argv += ["--context-length", str(spec.ctx)]
    _drop_gpu_layers(spec, notes, "SGLang")
    if spec.method in ("dflash", "dspark"):
        notes.append(f"{_METHOD_NAMES[spec.method]} needs a recent SGLang (checked against 0.5.23) and a CUDA, "
                     "NPU or XPU device")
    elif spec.method == "ngram":
        notes.append("SGLang runs NGRAM on CUDA (and CPU or XPU) only")
    return Export(engine="sglang", argv=argv, notes=notes)


# --------------------------------------------------------------------------- helpers


def _validate(spec: ExportSpec) -> None:
    if spec.method not in METHODS:
        raise UsageError(f"unknown method '{spec.method}'", hint=f"use one of: {', '.join(METHODS)}")
    if not spec.target or not str(spec.target).strip():
        raise UsageError("no target model to export", hint="pass --pair NAME or --target")
    checks = [
        (_is_int(spec.draft_max) and spec.draft_max >= 1, f"draft-max must be at least 1, not {spec.draft_max}",
         "pass --draft-max 1 or more"),
        (_is_int(spec.draft_min) and 0 <= spec.draft_min <= max(spec.draft_max, 0),
         f"draft-min must be between 0 and draft-max ({spec.draft_max}), not {spec.draft_min}",
         "lower --draft-min"),
        (isinstance(spec.p_min, (int, float)) and not isinstance(spec.p_min, bool) and 0.0 <= spec.p_min <= 1.0,
         f"p-min must be between 0 and 1, not {spec.p_min}", "pass --draft-p-min in [0, 1]"),
        (spec.ctx is None or (_is_int(spec.ctx) and spec.ctx >= 1), f"context must be at least 1, not {spec.ctx}",
         "pass --ctx 1 or more"),
        (spec.tensor_parallel is None or (_is_int(spec.tensor_parallel) and spec.tensor_parallel >= 1),
         f"tensor parallel size must be at least 1, not {spec.tensor_parallel}", "pass a GPU count of 1 or more"),
        (spec.gpu_layers is None or _is_int(spec.gpu_layers), f"bad GPU layer count {spec.gpu_layers}",
         "pass a whole number (-1 = all)"),
        (spec.gpu_layers_draft is None or _is_int(spec.gpu_layers_draft),
         f"bad draft GPU layer count {spec.gpu_layers_draft}", "pass a whole number (-1 = all)"),
        (all(v is None or (_is_int(v) and v >= 1) for v in (spec.ngram_min, spec.ngram_max))
         and _ngram_sizes(spec)[0] <= _ngram_sizes(spec)[1],
         f"n-gram sizes must be 1 or more, the smallest first, not {spec.ngram_min} and {spec.ngram_max}",
         "use 1 <= ngram-min <= ngram-max"),
        (spec.draft_block_size is None or (_is_int(spec.draft_block_size) and spec.draft_block_size >= 2),
         f"bad draft block size {spec.draft_block_size}", "read it from the draft's dflash.block_size"),
    ]
    for ok, problem, hint in checks:
        if not ok:
            raise UsageError(problem, hint=hint)
    if spec.method != "ngram" and not (spec.draft or spec.draft_repo):
        raise UsageError(f"{_METHOD_NAMES[spec.method]} needs a draft model and none was given",
                         hint="pass --draft (or a --pair whose entry names one)")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _source_note(spec: ExportSpec) -> str:
    where = _SOURCES.get(spec.settings_source, spec.settings_source)
    if spec.method == "ngram":
        what = f"draft-max {spec.draft_max}"
    else:
        what = f"draft-max {spec.draft_max}, draft-min {spec.draft_min}, p-min {_num(spec.p_min)}"
    return f"settings from {where}: {what}"


def _draft_len(spec: ExportSpec, engine: str, notes: list[str]) -> int:
    """draft-max, capped by a DFlash/DSpark draft's trained block when it is known.

    llama.cpp clamps the same way (common/speculative.cpp, DFlash constructor): a DFlash
    block is [last token, masks...] so it drafts block_size - 1 tokens; anchor-sampling
    DSpark drafts block_size. vLLM and SGLang would run a block of the wrong size instead.
    """
    n = spec.draft_max
    if spec.method not in ("dflash", "dspark"):
        return n
    if spec.draft_block_size is not None:
        most = spec.draft_block_size - (1 if spec.method == "dflash" else 0)
        if n > most:
            notes.append(f"draft-max lowered from {n} to {most}: the draft was trained with block size "
                         f"{spec.draft_block_size}")
            n = most
    elif engine == "llama-server":
        notes.append("llama-server lowers --spec-draft-n-max to what the draft's trained block size allows")
    else:
        per_block = "block_size - 1" if spec.method == "dflash" else "block_size"
        notes.append(f"draft-max {n} must not exceed what the draft was trained for: {_METHOD_NAMES[spec.method]} "
                     f"drafts {per_block} tokens (block_size in the draft's config.json)")
    return n


def _num(x: float) -> str:
    s = repr(float(x))
    return s[:-2] if s.endswith(".0") else s


def _ngl(n: int) -> str:
    # llama.cpp: -ngl N | auto | all; -1 is "auto" there, while specdec's -1 means all layers.
    return "all" if n < 0 else str(n)


def _ngram_sizes(spec: ExportSpec) -> tuple[int, int]:
    lo = spec.ngram_min if spec.ngram_min is not None else NGRAM_MATCH[0]
    hi = spec.ngram_max if spec.ngram_max is not None else max(NGRAM_MATCH[1], lo)
    return lo, hi


def _drop_ngram_extras(spec: ExportSpec, notes: list[str], engine: str, *, window: bool = True) -> None:
    if spec.p_min > 0:
        notes.append(f"p-min {_num(spec.p_min)} dropped: n-gram lookup has no draft probabilities")
    if spec.draft_min > 0:
        notes.append(f"draft-min {spec.draft_min} dropped: {engine}'s n-gram lookup has no minimum draft length")
    if not window and (spec.ngram_min is not None or spec.ngram_max is not None):
        lo, hi = _ngram_sizes(spec)
        notes.append(f"n-gram sizes {lo}-{hi} dropped: {engine} has no such setting")


def _drop_draft_extras(spec: ExportSpec, notes: list[str], engine: str, why: str) -> None:
    if spec.p_min > 0:
        notes.append(f"p-min {_num(spec.p_min)} dropped: {engine} has no draft-confidence cut-off; it {why}")
    if spec.draft_min > 0:
        notes.append(f"draft-min {spec.draft_min} dropped: {engine} has no minimum draft length")


def _drop_gpu_layers(spec: ExportSpec, notes: list[str], engine: str) -> None:
    dropped = [flag for flag, v in (("-ngl", spec.gpu_layers), ("-ngld", spec.gpu_layers_draft)) if v is not None]
    if dropped:
        notes.append(f"{'/'.join(dropped)} dropped: {engine} keeps whole models on the GPU "
                     "(spread them with the tensor-parallel size)")


def _same_vocab(spec: ExportSpec, engine: str) -> None:
    # vLLM: SpeculativeConfig.verify_equal_vocab_size_if_draft_model ("Target and draft
    # model should have the same vocabulary size"); SGLang: standalone_worker_v2.py
    # _validate_vocab_compatibility. llama.cpp accepts sizes up to 128 apart.
    t, d = spec.target_n_vocab, spec.draft_n_vocab
    if t is not None and d is not None and t != d:
        raise SpecdecError(
            f"{engine} needs a draft with exactly the target's vocabulary size, and these differ "
            f"({t} and {d} entries)",
            hint="export to llama-server, which accepts sizes up to 128 apart",
        )


_GGUF_WORD = re.compile(r"(?:^|[-_.])gguf(?:$|[-_.:])", re.IGNORECASE)


def _is_gguf(ref: str) -> bool:
    """A GGUF file or a GGUF repo id (``org/Model-GGUF``, ``org/Model-GGUF:Q4_K_M``).

    An existing regular file counts too: vLLM and SGLang load checkpoint folders or repo
    ids, never a single file."""
    last = ref.rstrip("/\\").replace("\\", "/").split("/")[-1]
    return bool(_GGUF_WORD.search(last)) or last.lower().endswith(".gguf") or _is_file(ref)


def _is_file(ref: str) -> bool:
    try:
        return Path(ref).expanduser().is_file()
    except (OSError, ValueError):
        return False


def _looks_like_gguf_file(ref: str) -> bool:
    """A path llama-server can load: named *.gguf, or an existing file starting with the GGUF magic."""
    if ref.lower().endswith(".gguf"):
        return True
    if not _is_file(ref):
        return False
    try:
        with open(Path(ref).expanduser(), "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _hf_checkpoint(side: str, engine: str, given: str | os.PathLike | None, repo: str | None,
                   notes: list[str]) -> str:
    """The Hugging Face checkpoint vLLM/SGLang should load for ``side``, or a refusal."""
    name = _ENGINE_NAMES[engine]
    given_s = os.fspath(given) if given is not None else None
    for candidate in (repo, given_s):
        if candidate and candidate.strip() and not _is_gguf(candidate):
            if given_s and candidate != given_s and _is_gguf(given_s):
                notes.append(f"{side}: {name} loads the Hugging Face checkpoint {candidate}, not the GGUF "
                             f"{given_s} (its own weights, e.g. BF16, not the GGUF's quantization)")
            return candidate
    known = ", ".join(x for x in (given_s, repo) if x) or "nothing"
    raise SpecdecError(
        f"{name} loads Hugging Face checkpoints, and the {side} is only known as a GGUF ({known})",
        hint=f"name the checkpoint it was converted from with --{side}-repo ORG/NAME, "
             "or export to llama-server, which loads GGUF",
    )


def _gguf_for_llama(side: str, given: str | os.PathLike | None, repo: str | None) -> str:
    """The GGUF path llama-server should load for ``side``, or a refusal."""
    given_s = os.fspath(given) if given is not None else None
    if given_s and _looks_like_gguf_file(given_s):
        return given_s
    what = given_s or repo or "nothing"
    if side == "draft" and repo and not _is_gguf(repo):
        hint = (f"convert {repo} with llama.cpp's convert_hf_to_gguf.py --target-model-dir TARGET_CHECKPOINT "
                "and pass the .gguf as the draft; vllm and sglang load it as it is")
    else:
        hint = f"pass the {side}'s .gguf file, or export to vllm or sglang, which load Hugging Face checkpoints"
    raise SpecdecError(f"llama-server loads GGUF files, and the {side} is not one ({what})", hint=hint)
