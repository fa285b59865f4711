"""How each engine names each speculative method: llama-server's --spec-type, vLLM's
speculative_config "method", SGLang's --speculative-algorithm.

Why one table per engine, side by side: a method an engine lacks is simply missing from
its table (the entry point refuses it, naming the engines that have it), and a new method
is added to every engine in one place. Each table cites where its spellings come from.
"""

from __future__ import annotations

# llama-server --spec-type values: common/speculative.cpp, the name table at the top
# ("draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark", "ngram-simple", ...),
# also listed in tools/server/README.md under --spec-type. specdec's "ngram" (copy what
# followed the last earlier occurrence of the last few tokens) is llama.cpp's
# "ngram-simple" ("looks for the last n-gram in history that matches the current n-gram
# and creates a draft using the m tokens following the matched n-gram", docs/speculative.md).
# "draft-mtp" ("Use Multi Token Prediction (MTP) heads from the main model", docs/speculative.md)
# drafts with the target's own nextn layers: common_speculative_init_result creates the MTP
# context against the target model when no draft model is given (common/speculative.cpp).
_LLAMA_SPEC_TYPE = {
    "draft": "draft-simple",
    "eagle3": "draft-eagle3",
    "dflash": "draft-dflash",
    "dspark": "draft-dspark",
    "ngram": "ngram-simple",
    "mtp": "draft-mtp",
}

# vLLM speculative_config "method": vllm/config/speculative.py, SpeculativeMethod =
# Literal["ngram", "draft_model", "suffix", "eagle", "eagle3", ..., "dflash", "ngram_gpu",
# "dspark"] (0.34.0). Docs: draft_model/ ("method": "draft_model"), n_gram/ ("method":
# "ngram"), eagle/ ("method": "eagle3"). MTP: "mtp" is in MTPModelTypes (part of
# SpeculativeMethod); the per-model names there ("deepseek_mtp", "qwen3_5_mtp",
# "qwen3_next_mtp", ...) are deprecated in 0.34.0: SpeculativeConfig.__post_init__ logs
# "method `...` is deprecated and replaced with mtp" and rewrites them to "mtp". Docs: mtp/
# ({"method": "mtp", "num_speculative_tokens": 1}).
_VLLM_METHOD = {
    "draft": "draft_model",
    "eagle3": "eagle3",
    "dflash": "dflash",
    "dspark": "dspark",
    "ngram": "ngram",
    "mtp": "mtp",
}

# SGLang --speculative-algorithm: sglang/srt/speculative/spec_info.py, enum
# SpeculativeAlgorithm {DFLASH, UNO, DSPARK, EAGLE, EAGLE3, FROZEN_KV_MTP, STANDALONE,
# NGRAM}; the docs' method table: EAGLE3, STANDALONE ("You have a smaller draft LLM"),
# NGRAM, DFLASH. MTP runs as EAGLE with the target's own MTP layers as the draft; "NEXTN" is
# an alias that resolves to EAGLE (spec_registry.py _RESERVED_ALIASES = {"NEXTN"};
# arg_groups/speculative_hook.py _resolve_speculative_algorithm_alias: NEXTN -> EAGLE), so
# the enum member's own name is emitted.
_SGLANG_ALGORITHM = {
    "draft": "STANDALONE",
    "eagle3": "EAGLE3",
    "dflash": "DFLASH",
    "dspark": "DSPARK",
    "ngram": "NGRAM",
    "mtp": "EAGLE",
}
