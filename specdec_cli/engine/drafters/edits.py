"""Edits learned as they happen: copy the source with the changes the output has been making.

On edit tasks (a rename, a format conversion, a fixed typo) the output is the prompt's text
with a few changes, often the same change many times. The suffix index copies the text well
until the first changed place, then keeps proposing the original at every later occurrence
of the change, and after a change its longest match often lands in the wrong copy of a
repeated line. This tracker follows the copy instead, on token ids alone:

* **Alignment.** A pointer into the source (the prompt) says where the copy is; while the
  output copies, it advances a token at a time. When the output leaves the source, the place
  it left is kept and each new token asks where the output's latest tokens are found in the
  source again, *closest after* that place (copies go forward; the longest match anywhere is
  often an earlier copy of a repeated line). A rejoin close by (up to ``NEAR`` tokens skipped
  or written) needs 2 matching tokens, or 1 right after a short change (a table whose
  delimiter changes every other token has no longer runs); a far one, or the first one of a
  prompt (the output may open with its own words), needs ``FAR_MATCH`` of its last
  ``FAR_WINDOW`` tokens to agree with the source, place for place. Candidates come from
  indexes of the source's pairs and skip-pairs (sorted positions): one bisection and a few
  checks per token, no scan of the source.
* **Rules.** A close rejoin is an edit: source tokens ``P`` were written as output tokens
  ``Q`` (either may be empty), kept as a rule with a neighbouring source token as context.
  While aligned, every place where the source holds a rule's ``P`` is followed both ways (a
  few live readings of where the copy is): writing ``Q`` confirms the rule, copying ``P`` or
  writing anything else refuses it. Counts are kept per context and over all contexts; a
  context met for the first time borrows the overall counts (a rename learned after ``=``
  applies after ``(``).
* **Proposal.** From the pointer, copy the source, writing a rule's ``Q`` in place of its
  ``P`` where the rule was confirmed more often than refused (ties go to the latest
  outcome, as in the suffix index). Each token says how it was made (``copy`` or
  ``substituted``), how many output tokens have followed the source since it was last left,
  and the counts of the rule it applied (for a copy over a pattern: of the rule it did not
  apply), the signals a ``Calibrator`` turns into an acceptance.

Rules outlive a prompt (``begin`` resets the alignment only): in a batch, the same rename
recurs across files. ``begin`` indexes the prompt in O(len); an output token costs a few
dictionary lookups and, while the copy is lost, a bisection and a bounded number of checks;
a proposed token costs a dictionary lookup.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import NamedTuple

NEAR = 16  # source tokens skipped or output tokens written by a change that is learned as a rule
NEAR1_SKIP, NEAR1_WRITE = 2, 4  # the smaller change a single matching token may close
FAR_WINDOW, FAR_MATCH = 8, 4  # a far rejoin: this many of the last tokens agree with the source
SCAN = 8  # candidates checked on each side of the pointer for a far rejoin
MAX_READINGS = 8  # live readings of where the copy is
RULES_PER_TOKEN = 16  # rules kept per first pattern token (the weakest goes first)
COPY, SUBSTITUTED = "copy", "substituted"


class CopyToken(NamedTuple):
    """A token of the tracker's copy of the source (copied, or written by a rule), and what a
    calibrator needs to guess whether it will be kept."""

    token: int
    kind: str  # COPY or SUBSTITUTED
    run: int  # output tokens that followed the source since the copy was last lost
    seen: int  # confirmations of the rule applied (copy: of the strongest one not applied; 0 if none)
    refused: int  # refusals of that rule


class Rule:
    """Source tokens ``pattern`` are written as ``replacement``; counts by the source token
    before it (its context) and overall.

    An insertion between X and Y is kept twice, as "after X" (empty pattern, looked up by X,
    context Y) and as "before Y" (pattern Y, replacement ending with Y), for the neighbour that
    generalises depends on the edit: a markdown row gains a pipe after the newline before it
    and one before the newline after it."""

    __slots__ = ("pattern", "replacement", "before", "counts", "by_context")

    def __init__(self, pattern: tuple[int, ...], replacement: tuple[int, ...], before: bool = False):
        self.pattern, self.replacement, self.before = pattern, replacement, before
        self.counts = [0, 0, False]  # seen, refused, whether the latest outcome was a confirmation
        self.by_context: dict[int, list] = {}

    @property
    def at_boundary(self) -> bool:
        """An insertion or a deletion: a change between two copied tokens."""
        return self.before or not self.pattern or not self.replacement

    def cell(self, ctx: int) -> list:
        return self.by_context.get(ctx, self.counts)

    def record(self, ctx: int, confirmed: bool) -> None:
        for cell in (self.counts, self.by_context.setdefault(ctx, [0, 0, False])):
            cell[0 if confirmed else 1] += 1
            cell[2] = confirmed


def _applies(cell: list) -> bool:
    return cell[0] > cell[1] or (cell[0] == cell[1] and cell[2])


class _Reading:
    """The copy is at source ``pos`` once ``rest`` (what is left of a rule's replacement) is
    written; ``rule`` is followed until confirmed or refused; ``edited``: an insertion or a
    deletion was just made before ``pos`` (one per place: a deletion must not eat a doubled
    word twice, an insertion must not be made again)."""

    __slots__ = ("pos", "rest", "rule", "ctx", "run", "start", "out_start", "edited")

    def __init__(self, pos, rest=(), rule=None, ctx=-1, run=0, start=0, out_start=0, edited=False):
        self.pos, self.rest, self.rule, self.ctx = pos, rest, rule, ctx
        self.run, self.start, self.out_start, self.edited = run, start, out_start, edited


def _index(src: list[int], gap: int) -> dict[tuple[int, int], list[int]]:
    """(src[e - gap], src[e]) -> every end position e, ascending."""
    index: dict[tuple[int, int], list[int]] = {}
    for e in range(gap, len(src)):
        index.setdefault((src[e - gap], src[e]), []).append(e)
    return index


class EditTracker:
    """Follows the output's copy of one prompt at a time, learning its edits across prompts."""

    def __init__(self, shared: EditTracker | None = None):
        """``shared``: a tracker whose rules this one learns into and applies (the sequences of one
        run: a rename made in one file is made in the next)."""
        self.rules: dict[int, list[Rule]] = shared.rules if shared else {}  # first pattern token -> rules
        self.inserts: dict[int, list[Rule]] = shared.inserts if shared else {}  # token before -> insertions
        self.stats = dict(proposed=0, substituted=0, rules=0, confirmed=0, refused=0, rejoined=0, lost=0)
        self.begin([])

    # --- driving it ---------------------------------------------------------------------------
    def begin(self, prompt: list[int], extra: tuple[list[int], ...] = ()) -> None:
        """A new source: the prompt, then ``extra`` (text the prompt holds in another spelling);
        learned rules are kept, the alignment starts over."""
        self.n_prompt = len(prompt)
        self.src = list(prompt) + [t for doc in extra for t in doc]
        self._pairs, self._skips = _index(self.src, 1), _index(self.src, 2)
        self.out: list[int] = []
        self._restart()

    def _restart(self) -> None:  # keeps the rules
        self._readings: list[_Reading] = []
        self._lost = (0, len(self.out))  # (source position, output index) where the copy was left
        self._fresh = True  # nothing aligned since: only a far rejoin, and no rule from it

    def extend(self, tokens: list[int]) -> None:
        """Output tokens the target accepted, in order, one or many at a time."""
        for t in tokens:
            self._step(t)

    def update(self, history: list[int]) -> None:
        """Same from prompt + output, as drafters are given it: takes the tokens not seen yet.
        A history shorter than before (rolled back) keeps the rules and restarts the alignment."""
        seen = self.n_prompt + len(self.out)
        if len(history) < seen:
            self.out = list(history[self.n_prompt :])
            self._restart()
        self.extend(history[max(seen, self.n_prompt) :])

    @property
    def aligned(self) -> bool:
        return bool(self._readings)

    # --- alignment ------------------------------------------------------------------------------
    def _rules_at(self, pos: int, edited: bool) -> list[tuple[Rule, int]]:
        """(rule, context) for each rule that may apply where the copy is to write ``src[pos]``:
        insertions after ``src[pos - 1]`` and rules whose pattern starts at ``pos``."""
        src, found = self.src, []
        if pos > 0 and not edited:
            found += [(r, src[pos] if pos < len(src) else -1) for r in self.inserts.get(src[pos - 1], ())]
        if pos < len(src):
            ctx = src[pos - 1] if pos > 0 else -1
            for r in self.rules.get(src[pos], ()):
                if not (edited and r.at_boundary) and tuple(src[pos : pos + len(r.pattern)]) == r.pattern:
                    found.append((r, ctx))
        return found

    def _rank(self, r: _Reading) -> tuple:
        return (r.rule is None or _applies(r.rule.cell(r.ctx)), r.run)

    def _step(self, tok: int) -> None:
        src, k = self.src, len(self.out)
        self.out.append(tok)
        if not self._readings:
            self._rejoin()
            return
        live, keys = [], set()
        for r in self._with_rules(k):
            if r.rest:
                ok = r.rest[0] == tok
                nxt = _Reading(r.pos, r.rest[1:], r.rule, r.ctx, r.run + 1, r.start, r.out_start, r.edited)
                done = ok and not nxt.rest  # the replacement is written out
            else:
                ok = r.pos < len(src) and src[r.pos] == tok
                nxt, done = _Reading(r.pos + 1, (), r.rule, r.ctx, r.run + 1, r.start, r.out_start), ok
            if r.rule is not None and (done or not ok):  # (a deletion is confirmed by the copy after it)
                r.rule.record(r.ctx, ok)
                self.stats["confirmed" if ok else "refused"] += 1
                nxt.rule = None
            key = (nxt.pos, nxt.rest, nxt.edited, id(nxt.rule))
            if ok and key not in keys:
                keys.add(key)
                live.append(nxt)
        if live:
            self._readings = sorted(live, key=self._rank, reverse=True)[:MAX_READINGS]
            return
        best = max(self._readings, key=self._rank)
        self._lost = (best.start, best.out_start) if best.rule is not None else (best.pos, k)
        self._readings = []
        self.stats["lost"] += 1
        self._rejoin()

    def _with_rules(self, k: int):
        """The readings, and for each plain copy one more per rule that may apply there."""
        for r in self._readings:
            yield r
            if r.rest or r.rule is not None:
                continue
            for rule, ctx in self._rules_at(r.pos, r.edited):
                yield _Reading(r.pos + len(rule.pattern), rule.replacement, rule, ctx, r.run, r.pos, k,
                               not rule.pattern or not rule.replacement)

    def _rejoin(self) -> None:
        """Has the output come back to the source since it left at ``self._lost``?"""
        out, src, (i, k) = self.out, self.src, self._lost
        n = len(out)
        if not self._fresh:
            if n - 2 >= k:  # two tokens, the closest after the place left
                ends = self._pairs.get((out[-2], out[-1]), ())
                j = bisect_left(ends, i + 1)
                if j < len(ends) and ends[j] - 1 - i <= NEAR and n - 2 - k <= NEAR:
                    return self._join(ends[j], 2, learn=True)
            if n - 1 - k <= NEAR1_WRITE:  # one token, right after a short change
                for e in range(i, min(i + NEAR1_SKIP + 1, len(src))):
                    if src[e] == out[-1]:
                        return self._join(e, 1, learn=True)
        far = self._far(i, k)
        if far is not None:
            self._join(far, FAR_MATCH, learn=False)

    def _agree(self, e: int, k: int) -> list[int]:
        """The output's last tokens (after index ``k``) that match the source read back from
        ``e``, a token inserted, dropped or changed here and there."""
        out, src, n, p, same = self.out, self.src, len(self.out), e, []
        for d in range(1, min(FAR_WINDOW, n - k) + 1):
            t = out[n - d]
            if p >= 0 and src[p] == t:
                same.append(t)
                p -= 1
            elif p >= 1 and src[p - 1] == t:
                same.append(t)
                p -= 2
        return same

    def _far(self, i: int, k: int) -> int | None:
        """The end position closest after ``i`` (else before it) where ``FAR_MATCH`` of the last
        ``FAR_WINDOW`` output tokens agree with the source, at least 3 of them distinct (a
        delimiter at every other place says nothing about where the copy is)."""
        out, n = self.out, len(self.out)
        if n - k < FAR_MATCH:
            return None
        best = None
        for index, key in ((self._pairs, (out[-2], out[-1])), (self._skips, (out[-3], out[-1]))):
            ends = index.get(key)
            if not ends:
                continue
            j = bisect_left(ends, i)
            for e in ends[j : j + SCAN] + ends[max(0, j - SCAN) : j][::-1]:
                same = self._agree(e, k)
                if len(same) >= FAR_MATCH and len(set(same)) >= FAR_MATCH - 1:
                    if best is None or (e < i, abs(e - i)) < (best < i, abs(best - i)):
                        best = e
                    break
        return best

    def _join(self, end: int, anchor: int, learn: bool) -> None:
        """The copy goes on after source ``end``; the output's last ``anchor`` tokens matched up to it."""
        i, k = self._lost
        if learn:
            self._learn(tuple(self.src[i : end - anchor + 1]), tuple(self.out[k : len(self.out) - anchor]), i)
        self._readings = [_Reading(end + 1, run=anchor)]
        self._fresh = False
        self.stats["rejoined"] += 1

    def _learn(self, pattern: tuple, replacement: tuple, i: int) -> None:
        src = self.src
        if pattern:
            self._add(self.rules, Rule(pattern, replacement), src[i - 1] if i > 0 else -1)
            return
        if i > 0:  # an insertion: after src[i - 1], and before src[i]
            self._add(self.inserts, Rule((), replacement), src[i], key=src[i - 1])
        self._add(self.rules, Rule((src[i],), replacement + (src[i],), before=True), src[i - 1] if i > 0 else -1)

    def _add(self, table: dict, new: Rule, ctx: int, key: int | None = None) -> None:
        rules = table.setdefault(new.pattern[0] if key is None else key, [])
        rule = next((r for r in rules if r.pattern == new.pattern and r.replacement == new.replacement), None)
        if rule is None:
            if len(rules) >= RULES_PER_TOKEN:
                rules.remove(min(rules, key=lambda r: r.counts[0] - r.counts[1]))
            rule = new
            rules.append(rule)
            self.stats["rules"] += 1
        rule.record(ctx, True)

    # --- proposing --------------------------------------------------------------------------------
    def propose(self, n_max: int) -> list[CopyToken]:
        """Up to ``n_max`` tokens to follow the output: the source from the pointer, with the
        rules that apply written in; nothing while the output does not follow the source."""
        if not self._readings or n_max <= 0:
            return []
        r = max(self._readings, key=self._rank)
        src, run, res = self.src, r.run, []
        if r.rest:
            cell = r.rule.cell(r.ctx)
            res += [CopyToken(t, SUBSTITUTED, run, cell[0], cell[1]) for t in r.rest]
        pos, edited = r.pos, r.edited
        while len(res) < n_max and pos < len(src):
            found = [(rule, rule.cell(ctx)) for rule, ctx in self._rules_at(pos, edited)]
            rule, cell = max(found, key=lambda rc: (_applies(rc[1]), rc[1][0] - rc[1][1], rc[1][0]),
                             default=(None, [0, 0, False]))
            if rule is not None and _applies(cell):
                res += [CopyToken(t, SUBSTITUTED, run, cell[0], cell[1]) for t in rule.replacement]
                pos, edited = pos + len(rule.pattern), not rule.pattern or not rule.replacement
            else:
                res.append(CopyToken(src[pos], COPY, run, cell[0], cell[1]))
                pos, edited = pos + 1, False
        res = res[:n_max]
        self.stats["proposed"] += len(res)
        self.stats["substituted"] += sum(d.kind == SUBSTITUTED for d in res)
        return res
