"""Hand a tuned pair to a serving engine: llama-server, vLLM or SGLang.

``export(spec, engine)`` turns the settings ``specdec run`` would use (the stored bench
recommendation, else the registry entry's, else specdec's defaults; the caller resolves
them into an :class:`ExportSpec`) into a ready-to-run command line for another engine,
spelled the way that engine spells it. Settings the engine has no equivalent for are left
out of the command and named in ``Export.notes``; a combination the engine cannot run is
refused with a :class:`~specdec_cli.errors.SpecdecError` (exit 1) that says what would work.
The rule is: never emit a command that would fail.

This module is the entry point: it checks the spec, refuses a method the engine lacks,
caps the draft length and hands over to the engine's module. The rest of the package:

* :mod:`.spec` -- ``ExportSpec``, ``Export`` and the checks on a spec;
* :mod:`.checkpoints` -- what each engine loads (GGUF files or Hugging Face checkpoints);
* :mod:`.spellings` -- how each engine names each method;
* :mod:`.llama_server`, :mod:`.vllm_serve`, :mod:`.sglang_launch` -- one engine each, with
  the sources its spellings come from;
* :mod:`.common` -- notes and refusals the engines share.

It may use ``models`` and the shared modules; ``commands`` use it.
"""

from __future__ import annotations

from ..errors import SpecdecError, UsageError
from .common import _DRAFTLESS, _num
from .llama_server import _llama_server
from .sglang_launch import _sglang
from .spec import _ENGINE_NAMES, _METHOD_NAMES, ENGINES, METHODS, NGRAM_MATCH, Export, ExportSpec, _validate
from .spellings import _LLAMA_SPEC_TYPE, _SGLANG_ALGORITHM, _VLLM_METHOD
from .vllm_serve import _vllm

__all__ = ["ENGINES", "METHODS", "NGRAM_MATCH", "ExportSpec", "Export", "export"]

# The engines' spellings of each method, by engine (the tables and their sources: spellings.py).
_SPELLINGS = {"llama-server": _LLAMA_SPEC_TYPE, "vllm": _VLLM_METHOD, "sglang": _SGLANG_ALGORITHM}

# Where the settings came from, as the first note says it.
_SOURCES = {
    "bench": "the stored bench recommendation",
    "registry": "the registry entry",
    "defaults": "specdec's defaults",
    "flags": "the command-line flags",
}


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
    if spec.draft and spec.method in _DRAFTLESS:
        notes.append(f"draft {spec.draft} dropped: {_DRAFTLESS[spec.method]}")
    if key == "llama-server":
        out = _llama_server(spec, n_draft, notes)
    elif key == "vllm":
        out = _vllm(spec, n_draft, notes)
    else:
        out = _sglang(spec, n_draft, notes)
    out.method = spec.method
    return out


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
