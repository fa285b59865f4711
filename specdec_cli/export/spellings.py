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
