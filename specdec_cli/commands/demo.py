"""``specdec demo``: the first thing a new user runs.

It fetches a small real pair (Qwen2.5-Coder 1.5B target, 0.5B draft) once, through the
same pinned, sha256-checked path the tests use, then measures, in one process, two cases:
writing new code (the target alone, with the draft model, and with auto) and editing a
given function (the target alone and auto, which copies from the prompt where it can). It
prints the speeds, and explains them from the costs it measured on this machine: how many
decode steps a verify pass and a draft token cost here. Tokens the target kept from a
proposal are coloured.
"""

from __future__ import annotations

import sys

from ..errors import EXIT_OK
from ..terminal import console, interrupts

DEMO_PROMPT = "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring."
EDIT_SOURCE = '''def parse_rows(text, sep=","):
    """Split CSV-like text into rows of stripped fields, skipping blank lines."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(sep)]
        rows.append(fields)
    return rows


def column(rows, index, default=None):
    """The values of one column; short rows give the default."""
    out = []
    for row in rows:
        out.append(row[index] if index < len(row) else default)
    return out


def to_markdown(rows):
    """Render rows as a Markdown table, the first row as the header."""
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    padded = [r + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(padded[0]) + " |", "|" + "---|" * width]
    for row in padded[1:]:
        lines.append("| " + " | ".join(row) + " |")
    return "\\n".join(lines)
'''
EDIT_PROMPT = ("Rename the function parse_rows to read_rows and the parameter sep to delimiter in this file. "
               "Output the whole file and nothing else.\n\n" + EDIT_SOURCE)


def run_demo(max_tokens: int = 128) -> int:
    from ..engine.decode.engine import AUTO_DRAFT_MAX, DraftOptions, Engine, EngineOptions, GenOptions
    from ..realmodels import DEMO_DRAFT, DEMO_TARGET, ensure_model

    target = ensure_model(DEMO_TARGET)
    draft = ensure_model(DEMO_DRAFT)
    engine = Engine(target, draft, options=EngineOptions(n_ctx=2048), draft=DraftOptions(draft_max=AUTO_DRAFT_MAX),
                    method="auto", warn=console.warn)
    colour = console.ansi_ok(sys.stdout)

    def show(segments):
        for text, drafted in segments:
            painted = colour and drafted
            console.write_text(f"{console.DRAFT_COLOUR}{text}{console.RESET}" if painted else text)

    try:
        costs = engine.ensure_costs()
        cases = [
            ("writing new code", DEMO_PROMPT, [("target alone", None), (f"draft model {draft.name}, 4 tokens", "draft"),
                                               ("auto", "auto")]),
            ("editing a given file", EDIT_PROMPT, [("target alone", None), ("auto", "auto")]),
        ]
        engine.generate(engine.tokenize_prompt("hello"), GenOptions(max_tokens=4), use_draft=False)  # warm-up
        summary = []
        for case, prompt, runs in cases:
            tokens = engine.tokenize_prompt(engine.render_chat([{"role": "user", "content": prompt}]))
            speeds = {}
            for label, method in runs:
                console.note(f"--- {case}: {label} ---")
                if method == "draft":
                    engine.set_draft(draft_max=4, p_min=0.0)
                elif method == "auto":
                    engine.set_draft(draft_max=AUTO_DRAFT_MAX, p_min=0.0)
                result = engine.generate(tokens, GenOptions(max_tokens=max_tokens), use_draft=method is not None,
                                         method=method, on_text=show)
                console.write_text("\n")
                console.note(result.stats.summary())
                if result.interrupted:
                    return interrupts.exit_code()
                speeds[label] = (result.stats.tokens_per_second or 0.0, result.stats.tokens_per_pass or 1.0)
            summary.append(speed_line(case, speeds))
        for line in summary:
            console.note(line)
        console.note(explain(costs))
        if colour:
            console.note("coloured text: proposed by a drafter and kept by the target")
        return EXIT_OK
    finally:
        engine.close()


OWN_PASSES = 1.05  # tokens per pass below which a run was (nearly) the target's own passes


def speed_line(case: str, speeds: dict[str, tuple[float, float]]) -> str:
    """One case's speeds against the target alone's (the first entry): label -> (tokens/s, tokens
    per pass). A run that emitted fewer than ``OWN_PASSES`` tokens a pass ran (nearly) the
    target's own passes: its drafts can account for a few percent at most, so its ratio is
    run-to-run variation and says so. On new code auto sends next to no draft, and a bare 1.08x
    there (2 tokens kept of 128, 1.02 a pass) would read as a speed-up it did not make."""
    base = next(iter(speeds.values()))[0] or 1.0
    cells = []
    for i, (label, (tps, per_pass)) in enumerate(speeds.items()):
        own = i > 0 and per_pass < OWN_PASSES
        cells.append(f"{label} {tps:.1f} tok/s ({tps / base:.2f}x"
                     + (f": {per_pass:.2f} tokens a pass, the target's own passes, so the difference is "
                        "run-to-run variation)" if own else ")"))
    return f"{case}: " + ", ".join(cells)


def explain(costs) -> str:
    """Why drafting pays or not here, in the measured costs' own terms."""
    from ..engine.policy.decisions import best_length

    step = costs.step_seconds()
    verify5 = costs.pass_seconds(5) / step
    d = costs.draft_seconds("draft")
    text = f"here one decode step takes {step * 1e3:.1f} ms and a 5-token verify pass costs {verify5:.1f} steps"
    if d:
        text += f"; one draft-model token costs {d / step:.2f} steps"
        if best_length([0.999] * 32, costs, d).k == 0:
            text += ", so the draft model cannot pay even if every token were kept"
        else:
            text += ", so the draft model pays when most of its tokens are kept"
    copy = best_length([0.99] * 32, costs)
    text += (f"; copying from the prompt costs nothing to propose, and at 99% acceptance auto drafts {copy.k} tokens "
             f"for an expected {copy.rate * step:.2f}x")
    return text
