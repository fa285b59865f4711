"""The interface every drafting method implements, shaped after llama.cpp's ``common_speculative_impl``.

The decode loop never asks which method it is driving. It calls:

- ``begin(prompt, sampler)``  once per generation, before the target's prefill, with every
  prompt token and the generation's ``Sampler`` when the proposals should be *sampled* (exact
  verification at temperature > 0), or ``None`` for greedy proposals;
- ``process(tokens, pos0)`` after each target pass (each prefill chunk included), with the
  tokens the target just evaluated: EAGLE-3 and DFlash read the target's hidden states for
  them here, before the next pass overwrites them; the others ignore it;
- ``propose(history, n_max)`` to propose up to ``n_max`` tokens that follow ``history``
  (the prompt, everything generated so far, and the last target token), as a ``Proposal``;
- ``accept(n_accepted)`` to learn how many proposals the target kept.

A drafter owns its own state (a draft context, an n-gram index, ...) and keeps it in step
with ``history`` itself, so the loop stays the same for every method. Drafters only propose;
what is kept is the verifier's business (``verify/verifiers.py``), as in vLLM's rejection sampler.

Greedy and sampled proposals. A proposal from a drafter that samples carries, per position,
the distribution q it drew the token from (after the generation's top-k, top-p and
temperature), which exact verification needs. A greedy proposal carries none, and exact
verification treats it as a point mass, which is still exact (why: ``verify/verifiers.py``'s module
docstring). Only the draft-model method samples (``sampled_proposals = True``): it is an
ordinary language model whose q is a real next-token distribution, and drawing from it is
what lets the exact rule keep drafts that sample-then-match would throw away.

EAGLE-3, DFlash and DSpark draft greedily, because that is how llama.cpp runs them
(``common/speculative.cpp``, as vendored by llama-cpp-python 0.3.36): the constructors of
``common_speculative_impl_draft_eagle3`` and ``common_speculative_impl_draft_dflash`` build
their draft sampler as top-k 10 alone, and their ``draft()`` proposes ``cur_p->data[0].id``,
the most probable candidate, never the sampled one (DFlash2 takes ``std::max_element`` of its
selector scores). DFlash and DSpark decode the whole block in one pass from
``[last token, mask, mask, ...]`` (the same ``draft()``), so a token sampled at one block
position could not condition the positions after it; the argmax path is the block the head
predicts. EAGLE-3 is autoregressive and could be sampled, but specdec keeps llama.cpp's
behaviour for it. Their point-mass proposals are verified exactly all the same, so the output
follows the target's distribution at any temperature.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..verify.verifiers import Proposal

if TYPE_CHECKING:
    from ..verify.verifiers import Sampler


class Drafter(ABC):
    #: registry/CLI method name: draft, ngram, eagle3, dflash, dspark
    method: str = ""
    #: True when ``propose`` samples from the draft's distribution once ``begin`` got a sampler;
    #: False for drafters that always propose greedily (a point mass per token).
    sampled_proposals: bool = False
    #: True when the drafter must see every target pass to draft at all (MTP catches up on each
    #: pass), so keeping it ready costs something even on steps that do not draft
    tracks_every_pass: bool = False
    #: True when ``process`` reads the target's hidden states for the tokens it is given (EAGLE-3,
    #: DFlash, MTP): every prompt token must then be evaluated again for each generation, so the
    #: target does not keep the prompt prefix its memory holds from the last one
    reads_target_states: bool = False
    #: auto's length rule for the drafters it drives step by step (the draft model, MTP): given
    #: the next token's confidence, whether drafting it still pays; None: the drafter's own rule
    stop_rule: Callable[[float], bool] | None = None
    #: the confidence of each token of the last proposal, for auto's calibration (those drafters)
    last_confidences: Sequence[float] = ()

    @property
    def last_source(self) -> str:
        """Which proposer made the last proposal, for the per-drafter step counts (auto has several)."""
        return self.method

    def begin(self, prompt: list[int], sampler: Sampler | None = None) -> None:  # noqa: B027
        """A new generation starts from ``prompt``.

        ``sampler``: the generation's ``Sampler`` (its transforms and its RNG) when proposals
        should be sampled from the draft's distribution; ``None`` for greedy proposals.
        Drafters that only draft greedily ignore it.
        """

    def process(self, tokens: list[int], pos0: int) -> None:  # noqa: B027 - optional hook
        """The target just evaluated ``tokens`` at positions ``pos0..``."""

    def propose(self, history: list[int], n_max: int) -> Proposal:
        """Up to ``n_max`` tokens to follow ``history``, with their distributions when sampled.

        The default wraps ``draft`` as a greedy proposal.
        """
        return Proposal(self.draft(history, n_max))

    @abstractmethod
    def draft(self, history: list[int], n_max: int) -> list[int]:
        """Propose up to ``n_max`` tokens greedily to follow ``history``; an empty list means no guess."""

    def accept(self, n_accepted: int) -> None:  # noqa: B027 - optional hook
        """The target kept the first ``n_accepted`` tokens of the last proposal."""

    def configure(self, *, n_max: int, p_min: float) -> None:  # noqa: B027 - optional hook
        """New draft settings between generations (bench's grid)."""

    def set_active(self, active: bool) -> None:  # noqa: B027 - optional hook
        """Whether the coming generations use this drafter. Heads switch the target's
        hidden-state extraction with it, so the target alone (the baseline) pays nothing."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free native resources."""
