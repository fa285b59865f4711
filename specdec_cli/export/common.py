"""Helpers the engine modules share: number spelling, the notes for settings an engine
has no equivalent for, and the refusals more than one engine makes.

Why one place: the same setting (p-min, draft-min, GPU layers, n-gram sizes) is dropped
by several engines, and its note should read the same whichever engine drops it.
"""

from __future__ import annotations

from ..errors import SpecdecError
from .spec import ExportSpec, _ngram_sizes

# Methods that draft without a draft model, and why a draft given with them is dropped.
_DRAFTLESS = {
    "ngram": "n-gram lookup uses no draft model",
    "mtp": "MTP drafts with the target's own nextn layers",
}


def _num(x: float) -> str:
    s = repr(float(x))
    return s[:-2] if s.endswith(".0") else s


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


def _whole_model_flags(spec: ExportSpec, notes: list[str], engine: str, *, tp_flag: str, ctx_flag: str) -> list[str]:
    """The tensor-parallel and context flags of vLLM and SGLang, which keep whole models on the
    GPU: GPU layer counts have no equivalent there and are dropped with a note."""
    argv = []
    if spec.tensor_parallel is not None:
        argv += [tp_flag, str(spec.tensor_parallel)]
    if spec.ctx is not None:
        argv += [ctx_flag, str(spec.ctx)]
    dropped = [flag for flag, v in (("-ngl", spec.gpu_layers), ("-ngld", spec.gpu_layers_draft)) if v is not None]
    if dropped:
        notes.append(f"{'/'.join(dropped)} dropped: {engine} keeps whole models on the GPU "
                     "(spread them with the tensor-parallel size)")
    return argv
