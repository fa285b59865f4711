"""The settings of an engine and of one generation, as data: how the models load
(``EngineOptions``), how far and how boldly a draft may run (``DraftOptions``), and what one
generation asks for (``GenOptions``: its budget, sampling, stops, grammar, and what its
output reports)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .llama.context import ContextParams
from .verify.verifiers import SamplingParams, verify_mode


@dataclass
class EngineOptions:
    n_ctx: int = 4096
    n_batch: int = 512
    threads: int | None = None
    gpu_layers: int = 0  # -1 = all
    gpu_layers_draft: int | None = None  # None = same as the target
    flash_attn: str = "auto"
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    verbose: bool = False
    # take rejected drafts back with llama.cpp's recurrent-state snapshots where it offers them;
    # False checkpoints instead (as llama.cpp's speculative-simple does for a classic draft)
    snapshots: bool = True
    # sequences decoded at once (``run_many``): the target's context then holds n_seq sequences of
    # n_ctx positions each in one unified cache, and so does the draft's
    n_seq: int = 1
    # the target's sequences each in a KV stream of its own instead of one unified pool (a server's:
    # ``ContextParams.kv_streams`` says when each pays)
    kv_streams: bool = False

    def context_params(self, n_outputs: int, n_rs_seq: int = 0, *, n_seq: int = 1, n_cells: int = 0,
                       streams: bool = False) -> ContextParams:
        """What one of the engine's contexts is created with: ``n_outputs`` logits rows, ``n_rs_seq``
        recurrent-state snapshots, ``n_seq`` sequences over ``n_cells`` cells (one sequence:
        ``n_ctx``), in KV streams of their own where ``streams`` (the target's, for a server)."""
        return ContextParams(
            n_rs_seq=n_rs_seq,
            n_seq_max=n_seq,
            kv_streams=streams and n_seq > 1,
            n_ctx=n_cells if n_seq > 1 else self.n_ctx,
            n_batch=self.n_batch,
            n_ubatch=self.n_batch,
            n_outputs_max=n_outputs,
            n_threads=self.threads,
            flash_attn=self.flash_attn,
            cache_type_k=self.cache_type_k,
            cache_type_v=self.cache_type_v,
        )


@dataclass
class DraftOptions:
    """Draft settings; the defaults apply when neither a flag nor the registry entry sets them.

    Measured on the Qwen2.5-Coder 1.5B/0.5B pair on 2 CPU cores (docs/auto.md, "Fixed draft
    settings"): short drafts cut by a confidence threshold lose least where verifying costs
    nearly as much per token as decoding; on GPUs longer drafts pay, so tune with your models.
    """

    draft_max: int = 4
    draft_min: int = 0  # greedy proposals only: dropping a short *sampled* proposal would bias the rest
    p_min: float = 0.5


@dataclass
class GenOptions:
    """One generation's settings. ``verify``: the rule that keeps draft tokens at temperature > 0,
    "auto", "exact" or "match" (what each does: ``verify/verifiers.py``'s module docstring)."""

    max_tokens: int = 256
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temp=0.0))
    stop: list[str] = field(default_factory=list)
    verify: str = "auto"
    grammar: object | None = None  # a compiled constraint (``structured/constraint.py``): output obeys it
    shown: frozenset[int] = frozenset()  # control tokens the text renders (a tool-call family's markers)
    logprobs: int | None = None  # report each kept token's log-probability, with this many alternatives

    def __post_init__(self) -> None:
        self.verify = verify_mode(self.verify).value
