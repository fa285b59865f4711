"""The ``vllm serve`` command line for a spec.

Why a module per engine: each spells the settings its own way, and each spelling is
pinned to that engine's sources (the method names are in :mod:`.spellings`). Here:
``vllm/config/speculative.py`` and ``vllm/engine/arg_utils.py`` of vLLM 0.34.0 (PyPI);
https://docs.vllm.ai/en/latest/features/speculative_decoding/ (draft_model/, n_gram/,
eagle/, mtp/ pages). Older releases may lack DFlash or DSpark.
"""

from __future__ import annotations

import json
from typing import Any

from .checkpoints import _hf_checkpoint
from .common import _drop_draft_extras, _drop_ngram_extras, _same_vocab, _whole_model_flags
from .spec import _METHOD_NAMES, Export, ExportSpec, _ngram_sizes
from .spellings import _VLLM_METHOD


def _vllm(spec: ExportSpec, n: int, notes: list[str]) -> Export:
    # `vllm serve MODEL` (positional model_tag), --speculative-config JSON (also -sc),
    # --tensor-parallel-size (-tp), --max-model-len: vllm/engine/arg_utils.py,
    # vllm/entrypoints/common/cli_args.py; the docs' example:
    # vllm serve Qwen/Qwen3-8B --speculative-config '{"model": "Qwen/Qwen3-0.6B",
    #   "num_speculative_tokens": 5, "method": "draft_model"}'  (features/speculative_decoding/draft_model/)
    target = _hf_checkpoint("target", "vllm", spec.target, spec.target_repo, notes)
    config: dict[str, Any] = {"method": _VLLM_METHOD[spec.method]}
    if spec.method == "ngram":
        config.update(_ngram_config(spec, n, notes))
    elif spec.method == "mtp":
        config.update(_mtp_config(spec, n, notes))
    else:
        config.update(_draft_config(spec, n, notes))
    argv = ["vllm", "serve", target, "--speculative-config", json.dumps(config)]
    argv += _whole_model_flags(spec, notes, "vLLM", tp_flag="--tensor-parallel-size", ctx_flag="--max-model-len")
    if spec.method in ("dflash", "dspark"):
        notes.append(f"{_METHOD_NAMES[spec.method]} needs a recent vLLM (checked against 0.34.0)")
    return Export(engine="vllm", argv=argv, notes=notes, speculative_config=config)


def _ngram_config(spec: ExportSpec, n: int, notes: list[str]) -> dict[str, Any]:
    # prompt_lookup_max / prompt_lookup_min: the n-gram sizes tried, longest first, as run
    # does (SpeculativeConfig fields; docs features/speculative_decoding/n_gram/).
    lo, hi = _ngram_sizes(spec)
    _drop_ngram_extras(spec, notes, "vLLM")
    return {"num_speculative_tokens": n, "prompt_lookup_max": hi, "prompt_lookup_min": lo}


def _mtp_config(spec: ExportSpec, n: int, notes: list[str]) -> dict[str, Any]:
    # No "model": MTPSpeculatorConfig.default_model drafts from the target checkpoint itself
    # (v1/worker/gpu/spec_decode/mtp/config.py); SpeculativeConfig.hf_config_override turns
    # its config into the MTP model (deepseek_v4 -> DeepSeekV4MTPModel, qwen3_5 ->
    # qwen3_5_mtp, ...). adapt_draft_model_config warns when num_speculative_tokens > 1 runs
    # the same MTP layer again, and refuses "mtp" on DeepSeek V4.1 (DSpark stages only).
    _drop_draft_extras(spec, notes, "vLLM", "drafts num_speculative_tokens tokens every step")
    notes.append("vLLM drafts with the MTP weights of the target checkpoint itself (its mtp.* tensors); "
                 "checkpoints that keep DSpark stages there instead (DeepSeek V4-Flash-0731, V4.1) need "
                 "the dspark method")
    if n > 1:
        notes.append(f"with num_speculative_tokens {n} vLLM runs the model's MTP layer again for each token "
                     "after the first (it warns this may lower acceptance)")
    return {"num_speculative_tokens": n}


def _draft_config(spec: ExportSpec, n: int, notes: list[str]) -> dict[str, Any]:
    draft = _hf_checkpoint("draft", "vllm", spec.draft, spec.draft_repo, notes)
    if spec.method == "draft":
        _same_vocab(spec, "vLLM")
    _drop_draft_extras(spec, notes, "vLLM", "drafts num_speculative_tokens tokens every step")
    return {"model": draft, "num_speculative_tokens": n}
