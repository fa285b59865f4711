"""The ``python3 -m sglang.launch_server`` command line for a spec.

Why a module per engine: each spells the settings its own way, and each spelling is
pinned to that engine's sources (the method names are in :mod:`.spellings`). Here:
``sglang/srt/arg_groups/fields/spec.py``, ``.../speculative_hook.py`` and
``sglang/srt/speculative/spec_info.py`` of SGLang 0.5.23 (PyPI), for MTP also
``sglang/srt/speculative/spec_registry.py`` and ``sglang/srt/configs/model_config.py``;
https://docs.sglang.io/docs/advanced_features/speculative_decoding. Older releases may
lack DFlash or DSpark.
"""

from __future__ import annotations

from .checkpoints import _hf_checkpoint
from .common import _drop_draft_extras, _drop_ngram_extras, _same_vocab, _whole_model_flags
from .spec import _METHOD_NAMES, Export, ExportSpec
from .spellings import _SGLANG_ALGORITHM


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
        argv += _ngram_args(spec, n, notes)
    elif spec.method == "mtp":
        argv += _mtp_args(spec, target, n, notes)
    else:
        argv += _draft_args(spec, n, notes)
    argv += _whole_model_flags(spec, notes, "SGLang", tp_flag="--tp-size", ctx_flag="--context-length")
    if spec.method in ("dflash", "dspark"):
        notes.append(f"{_METHOD_NAMES[spec.method]} needs a recent SGLang (checked against 0.5.23) and a CUDA, "
                     "NPU or XPU device")
    elif spec.method == "ngram":
        notes.append("SGLang runs NGRAM on CUDA (and CPU or XPU) only")
    return Export(engine="sglang", argv=argv, notes=notes)


def _ngram_args(spec: ExportSpec, n: int, notes: list[str]) -> list[str]:
    # NGRAM: the verify window (the last token plus drafts) is --speculative-num-draft-tokens;
    # drafts come from a suffix trie (speculative_hook.py _handle_ngram; ngram_worker.py).
    _drop_ngram_extras(spec, notes, "SGLang", window=False)
    notes.append("SGLang's NGRAM matches suffixes of up to --speculative-ngram-max-trie-depth tokens "
                 "(default 18) and may draft a small tree (--speculative-ngram-max-bfs-breadth, default 10) "
                 "within the verify window")
    return ["--speculative-num-draft-tokens", str(n + 1)]


def _mtp_args(spec: ExportSpec, target: str, n: int, notes: list[str]) -> list[str]:
    # MTP is EAGLE with the target as its own draft: the draft worker loads the target
    # checkpoint and configs/model_config.py swaps in its MTP architecture (is_draft_model:
    # Qwen3_5ForConditionalGeneration / Qwen3_5MoeForConditionalGeneration ->
    # Qwen3_5ForCausalLMMTP, DeepseekV3ForCausalLM -> DeepseekV3ForCausalLMNextN, ...).
    # Only DeepSeek/GLM-style architectures default the draft path to the target
    # (speculative_hook.py _handle_eagle_family, which merely warns when it is given), so
    # it is always passed: Qwen3.5 needs it.
    _drop_draft_extras(spec, notes, "SGLang", "verifies the whole draft every step")
    notes.append("SGLang runs MTP as EAGLE (NEXTN is its alias) with the target checkpoint as the draft: "
                 "it loads the checkpoint's own MTP weights")
    return ["--speculative-draft-model-path", target] + _chain_args(n)


def _draft_args(spec: ExportSpec, n: int, notes: list[str]) -> list[str]:
    draft = _hf_checkpoint("draft", "sglang", spec.draft, spec.draft_repo, notes)
    if spec.method == "draft":
        _same_vocab(spec, "SGLang")
    argv = ["--speculative-draft-model-path", draft]
    if spec.method in ("draft", "eagle3"):
        argv += _chain_args(n)
    elif spec.method == "dflash":
        # DFLASH runs one block of --speculative-num-draft-tokens (the anchor plus N
        # drafts); num-steps and topk are forced to 1 (_handle_dflash).
        argv += ["--speculative-num-draft-tokens", str(n + 1)]
    else:
        # DSPARK: gamma = --speculative-dspark-block-size drafted tokens, and
        # --speculative-num-draft-tokens must equal gamma + 1 (_handle_dspark).
        argv += ["--speculative-dspark-block-size", str(n), "--speculative-num-draft-tokens", str(n + 1)]
    _drop_draft_extras(spec, notes, "SGLang", "verifies the whole draft every step")
    return argv


def _chain_args(n: int) -> list[str]:
    # A chain of N drafted tokens: num-steps N, topk 1, num-draft-tokens N + 1
    # (speculative_hook.py _handle_eagle_family resets num-draft-tokens to steps + 1
    # when topk is 1; topk must be given once num-steps is).
    return ["--speculative-num-steps", str(n), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(n + 1)]
