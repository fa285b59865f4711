"""The rows of one target pass, laid out: each decoding sequence's last token and its draft, then
chunks of the prompts still being read, each chunk that ends its prompt followed by the prompt's
last token, so that the first generated token comes out of this pass (a pass sooner: the time
to first token of a server's requests), unless the prompt's last token is to go apart, in the
next pass, as it goes when its cells are restored (``SeqSlot.end_apart``).

Apart from ``scheduler.py``, which decides what goes in a pass and takes back what it did not
keep: this is only the arithmetic of positions, sequence ids and which rows want logits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..drafters.draft import Draft
from ..structured.pass_masks import PassMasks
from .jobs import SeqSlot


@dataclass
class PassBatch:
    """The tokens of one pass with their positions, sequences and whether each wants logits."""

    toks: list[int] = field(default_factory=list)
    pos: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    outs: list[bool] = field(default_factory=list)
    base: list[int] = field(default_factory=list)  # each decoding sequence's first row
    n_decoding: int = 0  # rows of the decoding sequences
    chunks: list[tuple[SeqSlot, int]] = field(default_factory=list)  # (prompt read, tokens of it in this pass)
    # prompts read to their end in this pass: (slot, the row of their last token, whose logits give the first)
    prompt_ends: list[tuple[SeqSlot, int]] = field(default_factory=list)

    def add(self, token: int, pos: int, seq: int, out: bool) -> None:
        self.toks.append(token)
        self.pos.append(pos)
        self.seqs.append(seq)
        self.outs.append(out)


def lay_out(decoding: list[SeqSlot], drafts: list[Draft], masks: list[PassMasks | None], reading: list[SeqSlot],
            *, n_batch: int, n_outputs_max: int) -> PassBatch:
    """The pass over ``decoding`` (with ``drafts``, cut to ``masks``) and as much of ``reading``'s prompts
    as fits in ``n_batch`` tokens and ``n_outputs_max`` logits rows."""
    b = PassBatch()
    for s, d, m in zip(decoding, drafts, masks):
        b.base.append(len(b.toks))
        # rows the grammar decides alone need no logits, unless their log-probabilities are asked
        wanted = m.wanted() if m is not None and s.gen.logprobs is None else None
        for i, t in enumerate([s.tokens[-1], *d.proposal.tokens]):
            b.add(t, s.n_cached + i, s.seq, wanted is None or wanted[i])
    b.n_decoding = len(b.toks)
    room = n_batch - len(b.toks)
    n_out = len(b.toks)  # every decoding token has its logits row
    for s in reading:
        take = min(room, s.unread)
        if take <= 0:
            break
        # a prompt chunk in bulk: up to n_batch rows, where a call per token would cost a millisecond
        b.toks.extend(s.tokens[s.n_cached : s.n_cached + take])
        b.pos.extend(range(s.n_cached, s.n_cached + take))
        b.seqs.extend([s.seq] * take)
        b.outs.extend([False] * take)
        b.chunks.append((s, take))
        room -= take
        if take == s.unread and room > 0 and n_out < n_outputs_max and not s.end_apart:
            n_out += 1
            b.prompt_ends.append((s, len(b.toks)))
            b.add(s.tokens[-1], len(s.tokens) - 1, s.seq, True)
            room -= 1
    return b
