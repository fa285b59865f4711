"""n-gram lookup grown up: the longest earlier match, and the continuation seen most often.

Where ``ngram.py`` copies what followed the latest occurrence of a 2- to 4-gram (llama.cpp's
``ngram-simple``), this index keeps, for contexts of 1 up to 32 tokens, how often each token
followed them, over the prompt and the output so far and, in a batch, over the outputs of
the earlier prompts of the same run (documents in a batch share structure). A proposal
follows the longest context that has been seen before and takes its most frequent
continuation (ties go to the latest), as SuffixDecoding (Snowflake, 2024) does with its
suffix trees. Each proposed token carries what the policy needs to guess whether it will
be kept: the length of the context it was found under and the share of that context's
occurrences that went on with it.

Adding a token costs one dictionary update per context length (a fixed set of lengths), and
proposing costs one lookup per length per proposed token: amortised O(1) per token.
"""

from __future__ import annotations

ORDERS = (32, 24, 16, 12, 8, 6, 4, 3, 2, 1)  # context lengths, longest first
# tokens of earlier outputs kept for a batch or a server's life: a novel token adds up to one
# row per order (4.6 KB of Python objects; repetitive text far less), so 32,000 tokens are at
# most ~150 MB, held once for every sequence of the run
SHARED_LIMIT = 32_000
FORGET_TO = 0.75  # past the limit the oldest outputs go until this share is left, then one rebuild


class _Table:
    """context tuple -> [counts by next token, best token, its count, total]."""

    def __init__(self):
        self.rows: dict[tuple[int, ...], list] = {}

    def add(self, seq: list[int], end: int) -> None:
        """Count ``seq[end]`` as the continuation of every context ending before it."""
        nxt = seq[end]
        rows = self.rows
        for n in ORDERS:
            if end < n:
                continue
            key = tuple(seq[end - n : end])
            row = rows.get(key)
            if row is None:
                rows[key] = [{nxt: 1}, nxt, 1, 1]
                continue
            counts = row[0]
            c = counts.get(nxt, 0) + 1
            counts[nxt] = c
            row[3] += 1
            if c >= row[2]:  # ties go to the latest
                row[1], row[2] = nxt, c

    def add_all(self, seq: list[int]) -> None:
        for end in range(1, len(seq)):
            self.add(seq, end)


class OutputPool:
    """Outputs of the run's finished generations, by prompt, for every index of the run to draw on
    (one index per sequence when many are decoded at once), and one table over all of them that
    those indices share (an index whose own prompt is in the pool builds its own without it).
    Past ``SHARED_LIMIT`` tokens the oldest are forgotten down to ``FORGET_TO`` of it and the
    table is built again, so a server's memory stays bounded and the rebuild is rare."""

    def __init__(self):
        self.outputs: dict[tuple, list[int]] = {}  # prompt -> its latest output
        # every output in ``outputs``, and until the next rebuild the ones a repeated prompt
        # replaced (stale counts only make a guess that the target checks anyway)
        self.table = _Table()
        self._total = 0  # tokens in ``outputs``
        self._in_table = 0  # tokens counted in ``table``

    def add(self, prompt_key: tuple, output: list[int]) -> None:
        if not output:
            return
        old = self.outputs.pop(prompt_key, None)  # re-added last: the newest
        self.outputs[prompt_key] = output
        self._total += len(output) - (len(old) if old else 0)
        self._in_table += len(output)
        if self._in_table <= SHARED_LIMIT:
            self.table.add_all(output)
            return
        while self._total > FORGET_TO * SHARED_LIMIT and len(self.outputs) > 1:
            self._total -= len(self.outputs.pop(next(iter(self.outputs))))
        self.table = _Table()
        for out in self.outputs.values():
            self.table.add_all(out)
        self._in_table = self._total


class SuffixIndex:
    """The lookup table of one generation, with earlier outputs of the run as a fallback."""

    def __init__(self, pool: OutputPool | None = None):
        """``pool``: the run's earlier outputs, shared with other indices; None keeps one of its own,
        fed with each generation's output when the next one begins."""
        self._local = _Table()
        self._indexed = 0
        self._shared = _Table()
        self._own_pool = pool is None
        self.pool = pool if pool is not None else OutputPool()
        self._shared_keys: set[tuple] = set()
        self._prompt_key: tuple | None = None
        self._prompt_len = 0
        self._last: list[int] = []

    def begin(self, prompt: list[int]) -> None:
        if self._own_pool:
            self.finish()
        key = tuple(prompt)
        self._prompt_key, self._prompt_len, self._last = key, len(prompt), []
        self._local = _Table()
        self._indexed = 0
        self._rebuild_shared(exclude=key)

    def finish(self) -> None:
        """Give this generation's output to the pool (the run's other prompts draft from it)."""
        if self._prompt_key is not None and len(self._last) > self._prompt_len:
            self.pool.add(self._prompt_key, self._last[self._prompt_len :])
        self._prompt_key = None

    def refresh(self) -> None:
        """Take in outputs other sequences added to the pool since ``begin``."""
        if self._prompt_key is not None:
            self._rebuild_shared(exclude=self._prompt_key)

    def _rebuild_shared(self, exclude: tuple) -> None:
        """Outputs of *other* prompts only: a repeated prompt (bench) must not find its own answer.
        Unless the prompt is in the pool, that is the pool's own table, shared, not copied."""
        outputs = self.pool.outputs
        if exclude not in outputs:
            self._shared, self._shared_keys = self.pool.table, set()
            return
        if self._shared is self.pool.table:  # its own from here: the pool's is never grown in place
            self._shared, self._shared_keys = _Table(), set()
        keys = {k for k in outputs if k != exclude}
        if keys == self._shared_keys:
            return
        if self._shared_keys <= keys:
            for k in keys - self._shared_keys:
                self._shared.add_all(outputs[k])
        else:
            self._shared = _Table()
            for k in keys:
                self._shared.add_all(outputs[k])
        self._shared_keys = keys

    def add_source(self, tokens: list[int]) -> None:
        """Index ``tokens`` for this generation as if the prompt held them too (until ``begin``)."""
        self._local.add_all(tokens)

    def extend(self, history: list[int]) -> None:
        """Index every context of ``history`` whose continuation is known."""
        for end in range(max(1, self._indexed), len(history)):
            self._local.add(history, end)
        self._indexed = max(self._indexed, len(history))
        self._last = history

    def _lookup(self, ctx: list[int]) -> tuple[int, float, int] | None:
        """(token, share of the context's occurrences it followed, context length) or None."""
        for n in ORDERS:
            if len(ctx) < n:
                continue
            key = tuple(ctx[-n:])
            row = self._local.rows.get(key) or self._shared.rows.get(key)
            if row is not None:
                return row[1], row[2] / row[3], n
        return None

    def propose(self, history: list[int], n_max: int, keep=None) -> tuple[list[int], list[float], list[int]]:
        """Up to ``n_max`` tokens to follow ``history``, each with its share and context length.

        ``keep(share, order) -> bool``, when given, is asked before each further token: a
        caller that knows the rest cannot pay stops the walk early."""
        self.extend(history)
        ctx = history[-ORDERS[0] :]
        toks: list[int] = []
        shares: list[float] = []
        orders: list[int] = []
        while len(toks) < n_max:
            hit = self._lookup(ctx)
            if hit is None:
                break
            tok, share, n = hit
            if keep is not None and not keep(share, n):
                break
            toks.append(tok)
            shares.append(share)
            orders.append(n)
            ctx.append(tok)
            if len(ctx) > ORDERS[0]:
                del ctx[0]
        return toks, shares, orders
