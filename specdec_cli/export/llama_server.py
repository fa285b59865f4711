"""The ``llama-server`` command line for a spec.

Why a module per engine: each spells the settings its own way, and each spelling is
pinned to that engine's sources (the method names are in :mod:`.spellings`). Here:
``common/arg.cpp`` and ``common/speculative.cpp`` of the llama.cpp vendored in
llama-cpp-python 0.3.36 (also ``tools/server/README.md`` and ``docs/speculative.md``
there; https://github.com/ggml-org/llama.cpp/blob/master/docs/speculative.md).
"""

from __future__ import annotations

from ..models.methods import Method
from .checkpoints import _gguf_for_llama, _mtp_target_for_llama
from .common import _drop_ngram_extras, _num
from .spec import Export, ExportSpec, _ngram_sizes
from .spellings import _LLAMA_SPEC_TYPE

# Why -ngld does not apply to a method without a draft model.
_NGLD_DROPPED = {
    "ngram": "n-gram lookup has no draft model",
    "mtp": "the MTP layers are part of the target model, and -ngl places them",
}


def _llama_server(spec: ExportSpec, n: int, notes: list[str]) -> Export:
    # -m/--model, -md/--model-draft (canonical --spec-draft-model), --spec-type,
    # --spec-draft-n-max, --spec-draft-n-min, --spec-draft-p-min (alias --draft-p-min),
    # -ngl/--gpu-layers, -ngld (canonical --spec-draft-ngl), -c/--ctx-size: common/arg.cpp.
    # (The older --draft/--draft-max/--draft-min are removed there and now fail.)
    target = _gguf_for_llama("target", spec.target, None)
    argv = ["llama-server", "-m", target]
    if spec.method == "ngram":
        argv += _ngram_args(spec, n, notes)
    elif spec.method == "mtp":
        argv += _mtp_args(spec, target, n, notes)
    else:
        argv += _draft_model_args(spec, n, notes)
    argv += _layer_args(spec, notes)
    if spec.ctx is not None:
        argv += ["-c", str(spec.ctx)]
    if spec.tensor_parallel is not None:
        notes.append(f"tensor parallel {spec.tensor_parallel} not set: llama-server has no tensor-parallel size; "
                     "it splits the layers over every visible GPU (--split-mode layer, the default; limit them "
                     "with --device) and over other machines with --rpc HOST:PORT,... (rpc-server workers)")
    return Export(engine="llama-server", argv=argv, notes=notes)


def _ngram_args(spec: ExportSpec, n: int, notes: list[str]) -> list[str]:
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
    _drop_ngram_extras(spec, notes, "llama-server")
    return ["--spec-type", _LLAMA_SPEC_TYPE["ngram"],
            "--spec-ngram-simple-size-n", str(look), "--spec-ngram-simple-size-m", str(n)]


def _mtp_args(spec: ExportSpec, target: str, n: int, notes: list[str]) -> list[str]:
    # draft-mtp with no -md: common_speculative_init_result creates the MTP context against the
    # target model itself (LLAMA_CONTEXT_TYPE_MTP), and the MTP draft honours n-max, n-min and
    # p-min like a draft model (common/speculative.cpp, common_speculative_impl_draft_mtp;
    # defaults n_max 3, p_min 0 in common/common.h). Chained heads (n_layer_nextn > 1, Step-3.5)
    # cap n-max at the head count themselves.
    _mtp_target_for_llama(target, spec.target_has_mtp, notes)
    return ["--spec-type", _LLAMA_SPEC_TYPE["mtp"]] + _draft_len_args(spec, n, spec.p_min, notes)


def _draft_model_args(spec: ExportSpec, n: int, notes: list[str]) -> list[str]:
    draft = _gguf_for_llama("draft", spec.draft, spec.draft_repo)
    p_min = spec.p_min
    if spec.method == "dspark" and p_min > 0 and spec.draft_has_confidence_head is False:
        # common/speculative.cpp: "DSpark draft has no confidence head: please set
        # --spec-draft-p-min 0" (thrown when dflash.has_confidence_head is false).
        notes.append(f"p-min {_num(p_min)} dropped to 0: llama-server applies p-min to DSpark through "
                     "the draft's confidence head, and this draft has none")
        p_min = 0.0
    argv = ["-md", draft, "--spec-type", _LLAMA_SPEC_TYPE[spec.method]] + _draft_len_args(spec, n, p_min, notes)
    if spec.method == "dspark" and p_min > 0 and spec.draft_has_confidence_head is None:
        notes.append("llama-server refuses to start a DSpark draft converted without a confidence head "
                     "(dflash.has_confidence_head = false) unless --spec-draft-p-min is 0")
    return argv


def _draft_len_args(spec: ExportSpec, n: int, p_min: float, notes: list[str]) -> list[str]:
    n_min = min(spec.draft_min, n)
    if n_min != spec.draft_min:
        notes.append(f"draft-min lowered from {spec.draft_min} to {n_min}, the draft length")
    return ["--spec-draft-n-max", str(n), "--spec-draft-n-min", str(n_min), "--spec-draft-p-min", _num(p_min)]


def _layer_args(spec: ExportSpec, notes: list[str]) -> list[str]:
    argv = ["-ngl", _ngl(spec.gpu_layers)] if spec.gpu_layers is not None else []
    if Method(spec.method).needs_draft_file:
        ngld = spec.gpu_layers_draft if spec.gpu_layers_draft is not None else spec.gpu_layers
        if ngld is not None:
            argv += ["-ngld", _ngl(ngld)]
    elif spec.gpu_layers_draft is not None:
        notes.append(f"-ngld dropped: {_NGLD_DROPPED[spec.method]}")
    return argv


def _ngl(n: int) -> str:
    # llama.cpp: -ngl N | auto | all; -1 is "auto" there, while specdec's -1 means all layers.
    return "all" if n < 0 else str(n)
