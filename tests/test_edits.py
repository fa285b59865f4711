"""The edit tracker on token streams alone: alignment, learned substitutions, proposals."""

from __future__ import annotations

import random
import time

from specdec_cli.engine.drafters.edits import COPY, SUBSTITUTED, EditTracker


class Vocab:
    """Words to token ids and back, one id per word."""

    def __init__(self):
        self.ids: dict[str, int] = {}
        self.words: list[str] = []

    def __call__(self, text: str) -> list[int]:
        out = []
        for w in text.split():
            if w not in self.ids:
                self.ids[w] = len(self.words)
                self.words.append(w)
            out.append(self.ids[w])
        return out

    def text(self, tokens) -> str:
        return " ".join(self.words[t] for t in tokens)


def proposed(tr: EditTracker, v: Vocab, n: int) -> str:
    return v.text(d.token for d in tr.propose(n))


def start(v: Vocab, prompt: str, output: str = "") -> EditTracker:
    tr = EditTracker()
    tr.begin(v(prompt))
    tr.extend(v(output))
    return tr


CODE = "def f ( tmp ) : NL x = tmp + 1 NL y = g ( tmp ) * 2 NL return tmp - y NL"


def test_a_rename_seen_once_is_applied_at_its_next_occurrence():
    v = Vocab()
    tr = start(v, "rename tmp to total : " + CODE, "def f ( total ) : NL x = total + 1 NL y = g (")
    drafts = tr.propose(10)
    assert v.text(d.token for d in drafts) == "total ) * 2 NL return total - y NL"
    assert [d.kind for d in drafts[:2]] == [SUBSTITUTED, COPY]
    assert drafts[0].seen >= 1 and drafts[0].refused == 0
    assert tr.stats["substituted"] == 2


def test_the_rename_is_confirmed_as_the_output_repeats_it():
    v = Vocab()
    tr = start(v, "rename tmp to total : " + CODE, "def f ( total ) : NL x = total + 1 NL y = g ( total ) * 2 NL")
    d = tr.propose(3)
    assert v.text(x.token for x in d) == "return total -"
    assert d[1].seen == 2 and d[1].refused == 0  # learned at "x =", confirmed after "("
    assert d[0].run > 5


def test_a_refused_rule_fades():
    v = Vocab()
    src = "a = tmp ; b = tmp ; c = tmp ; d = tmp ; e = tmp ; f = tmp ; g = tmp ;"
    tr = start(v, "edit : " + src, "a = tmp ; b = total ; c = tmp ;")  # one rename, then refused
    assert tr.stats["refused"] == 1
    d = tr.propose(3)
    assert v.text(x.token for x in d) == "d = tmp"  # 1 seen, 1 refused, the refusal latest
    assert d[2].kind == COPY and (d[2].seen, d[2].refused) == (1, 1)
    tr.extend(v("d = tmp ; e = tmp ;"))
    d = tr.propose(3)
    assert v.text(x.token for x in d) == "f = tmp" and (d[2].seen, d[2].refused) == (1, 3)


def test_the_rule_is_specific_to_its_context_once_that_context_was_seen():
    v = Vocab()
    src = "w = 0 ; x = tmp ; y ( tmp ) ; x = tmp ; y ( tmp ) ; x = tmp ; y ( tmp ) ;"
    # after "=", tmp becomes total; after "(", the output keeps it
    tr = start(v, "edit : " + src, "w = 0 ; x = total ; y ( tmp ) ; x = total ; y (")
    assert proposed(tr, v, 7) == "tmp ) ; x = total ;"


def test_alignment_recovers_after_an_insertion():
    v = Vocab()
    src = "one two three four five six seven eight nine ten"
    tr = start(v, "copy : " + src, "one two three four five NEW WORDS six seven")
    assert proposed(tr, v, 3) == "eight nine ten"
    before = tr.rules[v.ids["six"]][0]  # kept as "before six" and as "after five"
    assert v.text(before.pattern) == "six" and v.text(before.replacement) == "NEW WORDS six"
    after = tr.inserts[v.ids["five"]][0]
    assert after.pattern == () and v.text(after.replacement) == "NEW WORDS"


def test_alignment_recovers_after_a_deletion():
    v = Vocab()
    src = "one two three four five six seven eight nine ten eleven"
    tr = start(v, "copy : " + src, "one two three four five eight nine")
    assert proposed(tr, v, 2) == "ten eleven"
    rule = tr.rules[v.ids["six"]][0]
    assert v.text(rule.pattern) == "six seven" and rule.replacement == ()


def test_a_learned_deletion_is_applied_and_confirmed():
    v = Vocab()
    src = "a b c d ; p the the q ; r the the s ; t the the u ;"
    tr = start(v, "fix : " + src, "a b c d ; p the q ; r the")
    assert proposed(tr, v, 4) == "s ; t the"  # the doubled "the" is dropped
    tr.extend(v("s ;"))
    assert tr.stats["confirmed"] >= 1


def test_after_an_edit_in_a_repeated_line_the_draft_resumes_in_the_right_copy():
    v = Vocab()
    line = "total = total + value ( item ) NL "
    src = "A1 A2 A3 NL " + line + "B1 B2 B3 NL " + line + "C1 C2 C3 NL " + line + "D1 D2 D3 NL"
    out = "A1 A2 A3 NL " + line + "B1 B2 B3 NL " + "total = total + price ( item ) NL"
    tr = start(v, src, out)
    assert proposed(tr, v, 4) == "C1 C2 C3 NL"  # not A's nor D's neighbour: the copy goes forward
    tr.extend(v("C1 C2 C3 NL total = total +"))
    assert proposed(tr, v, 4) == "price ( item )"  # the edit, learned


def test_a_delimiter_change_in_a_table_is_learned_after_one_row():
    v = Vocab()
    rows = "name , age , city NL ann , 31 , rome NL bob , 42 , oslo NL cat , 53 , nice NL"
    tr = start(v, "convert to a table : " + rows, "name | age | city NL ann | 31 | rome NL")
    drafts = tr.propose(16)
    assert v.text(d.token for d in drafts) == "bob | 42 | oslo NL cat | 53 | nice NL"
    assert drafts[1].kind == SUBSTITUTED and drafts[1].seen >= 2


def test_a_markdown_table_with_outer_pipes():
    v = Vocab()
    rows = "name , age NL ann , 31 NL bob , 42 NL cat , 53 NL dan , 64 NL"
    out = "| name | age | NL | ann | 31 | NL | bob | 42 | NL |"
    tr = start(v, "convert : " + rows, out)
    assert proposed(tr, v, 9) == "cat | 53 | NL | dan | 64"


def test_nothing_is_proposed_when_the_output_does_not_follow_the_source():
    v = Vocab()
    tr = start(v, "please summarise : " + CODE)
    for w in ["the", "function", "adds", "one", "and", "then", "doubles", "the", "value", "before", "it", "returns"]:
        tr.extend(v(w))
        assert tr.propose(5) == []
    assert not tr.aligned


def test_the_copy_is_lost_when_the_output_leaves_for_good():
    v = Vocab()
    tr = start(v, "copy : " + CODE, "def f ( tmp ) : NL x = tmp")
    assert tr.propose(2)
    tr.extend(v("which is the input plus one , so the result grows"))
    assert tr.propose(5) == []


def test_extend_by_many_tokens_and_update_from_the_history_agree():
    v = Vocab()
    prompt = v("rename tmp to total : " + CODE)
    out = v("def f ( total ) : NL x = total + 1 NL y = g (")
    a, b = EditTracker(), EditTracker()
    a.begin(prompt)
    b.begin(prompt)
    for t in out:
        a.extend([t])
    for cut in (3, 10, len(out)):
        b.update(prompt + out[:cut])
    assert a.propose(8) == b.propose(8)
    b.update(prompt + out[:5])  # rolled back: the alignment starts over, rules stay
    assert not b.aligned and b.rules


def test_rules_carry_over_to_the_next_prompt_of_a_batch():
    v = Vocab()
    tr = start(v, "rename tmp : " + CODE, "def f ( total ) : NL x = total + 1 NL")
    tr.begin(v("rename tmp : a = tmp * 3 NL b = h ( tmp ) NL"))
    tr.extend(v("a = total * 3 NL b = h ("))
    assert proposed(tr, v, 3) == "total ) NL"
    tr.begin(v("rename tmp : print ( tmp , tmp ) NL"))
    tr.extend(v("print ("))
    assert not tr.aligned  # alignment was reset: too few tokens yet to find the copy


def test_a_long_source_with_many_repeats_stays_fast():
    rng = random.Random(0)
    v = Vocab()
    templates = [f"x{i} = tmp + y{i % 7} ( tmp ) NL" for i in range(40)] + ["return tmp NL", "pass NL"] * 10
    lines = [rng.choice(templates) for _ in range(3000)]
    src = v(" ".join(lines))
    assert len(src) >= 20_000
    out = v(" ".join(lines[:250]).replace("tmp", "total"))[:2000]
    tr = EditTracker()
    tr.begin(src)
    t0 = time.perf_counter()
    kept = 0
    for _i, t in enumerate(out):
        drafts = tr.propose(8)
        kept += bool(drafts) and drafts[0].token == t
        tr.extend([t])
    elapsed = time.perf_counter() - t0
    assert elapsed < 3.0, elapsed  # about 50 us a token here
    assert kept > 0.95 * len(out)
    assert tr.stats["substituted"] > 100
