"""What the target keeps of a draft and how the rest is taken back, kept apart from the
drafters (as vLLM does): the verifiers and the sampler (``verifiers``: greedy, sample-then-match
and exact; the ``Proposal`` a drafter hands over), taking a rejected draft back out of whatever
memory the target keeps (``rollback``), the target's log-probabilities of the tokens it kept
(``logprobs``), and the proof that a speculative run is the target's own output, or differs only
at a near-tie (``divergence``).

Below the drafters and the decoding loops, which both use it; above ``llama/``, whose contexts
``rollback`` drives.
"""
