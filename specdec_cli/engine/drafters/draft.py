"""A draft as auto and the passes carry it: one shape from the proposers that make it
(``auto.py``: the suffix index, the edit tracker, the step-wise drafter) through a pass's plan
(``decode/pass_drafts.py``) and the grammar's cut to the scheduler's verification, and back to
auto's calibration.

A ``Proposal`` (``verify/verifiers.py``) is what the verifier checks: tokens, and the draft's
distributions where it sampled them. A ``Draft`` is that proposal with what the policy needs
besides: who made it, how many of its tokens a grammar forced, and, per token after those, the
signal its acceptance is calibrated from and its face value, which auto learns from once the
target has kept some; while it is still a candidate, before a length is chosen, also each
token's calibrated acceptance. Below the decode loops (drafters sit under them), so that auto,
which makes drafts, and the pass, which plans and verifies them, share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..verify.verifiers import Proposal

NO_PROPOSAL = Proposal([])  # shared, never mutated


@dataclass
class Draft:
    """One proposer's draft for one sequence, and what auto learns from its verification."""

    proposal: Proposal
    source: str  # "ngram", "edit", "grammar", the step-wise drafter's name ("draft", "mtp"), or "none"
    buckets: list[tuple] = field(default_factory=list)  # per token after the forced ones: its signal's bucket
    priors: list[float] = field(default_factory=list)  # per such token: the signal's face value
    n_forced: int = 0  # tokens at its head the grammar forced (kept for certain; auto learns from the rest)
    # per token, while a candidate: its calibrated acceptance, given the ones before it are kept
    accept: list[float] = field(default_factory=list)

    @classmethod
    def nothing(cls) -> Draft:
        """No draft: the pass carries the sequence's last token alone."""
        return cls(NO_PROPOSAL, "none")

    @property
    def tokens(self) -> list[int]:
        return self.proposal.tokens

    def first(self, k: int) -> Draft:
        """A candidate cut to the ``k`` tokens the policy chose, its signals with them: a draft to
        send (its acceptances, which chose ``k``, stay with the candidate)."""
        return Draft(self.proposal.truncated(k), self.source, self.buckets[:k], self.priors[:k])

    def behind(self, forced: list[int], k: int) -> Draft:
        """``forced`` (a grammar's, kept for certain), then this draft's tokens, ``k`` in all; named
        after this draft's source where any of its tokens made it, else the grammar's."""
        if not k:
            return Draft.nothing()
        extra = max(0, k - len(forced))
        subst = [False] * len(forced) + (self.proposal.subst or [False] * len(self.tokens))
        proposal = Proposal((forced + self.tokens)[:k], subst=subst[:k] if any(subst[:k]) else None)
        return Draft(proposal, self.source if extra else "grammar", self.buckets[:extra], self.priors[:extra],
                     len(forced))

    def cut(self, proposal: Proposal) -> Draft:
        """This draft as a pass carries it: ``proposal``, a prefix of its own (a grammar cut it
        before the first token it rejects; ``PassMasks.along``). The signals of tokens never
        sent go with them, so auto does not learn them as refused."""
        n = len(proposal)
        if n == len(self.proposal):
            return self
        if n == 0:
            return Draft.nothing()
        forced = min(self.n_forced, n)
        return Draft(proposal, self.source, self.buckets[: n - forced], self.priors[: n - forced], forced)
