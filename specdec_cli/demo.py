"""``specdec demo``: the first thing a new user runs.

It fetches a small real pair (Qwen2.5-Coder 1.5B target, 0.5B draft) once, through the
same pinned, sha256-checked path the tests use, then generates for one code prompt twice
in one process -- the target alone, then with the draft -- and prints both speeds and the
acceptance rate. The tokens the draft proposed and the target kept are coloured.
"""

from __future__ import annotations

import sys

from . import console
from .errors import EXIT_INTERRUPTED, EXIT_OK

DEMO_PROMPT = "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring."


def run_demo(max_tokens: int = 128) -> int:
    from .engine.runner import DraftOptions, Engine, EngineOptions, GenOptions
    from .realmodels import DEMO_DRAFT, DEMO_TARGET, ensure_model

    target = ensure_model(DEMO_TARGET)
    draft = ensure_model(DEMO_DRAFT)
    engine = Engine(target, draft, options=EngineOptions(n_ctx=2048), draft=DraftOptions())
    colour = console.ansi_ok(sys.stdout)
    try:
        tokens = engine.tokenize_prompt(engine.render_chat([{"role": "user", "content": DEMO_PROMPT}]))
        gen = GenOptions(max_tokens=max_tokens)
        engine.generate(tokens[:8], GenOptions(max_tokens=4), use_draft=False)  # warm-up, not shown
        runs = []
        for label, use_draft in (("target alone", False), (f"with draft {draft.name}", True)):
            console.note(f"--- {label} ---")

            def show(segments):
                for text, drafted in segments:
                    painted = colour and drafted
                    console.write_text(f"{console.DRAFT_COLOUR}{text}{console.RESET}" if painted else text)

            result = engine.generate(tokens, gen, use_draft=use_draft, on_text=show)
            console.write_text("\n")
            console.note(result.stats.summary())
            runs.append(result)
            if result.interrupted:
                return EXIT_INTERRUPTED
        base, spec = runs[0].stats, runs[1].stats
        ratio = (spec.tokens_per_second or 0) / (base.tokens_per_second or 1)
        console.note(
            f"target alone {base.tokens_per_second:.2f} tok/s, with draft {spec.tokens_per_second:.2f} tok/s "
            f"({ratio:.2f}x), acceptance {100 * (spec.acceptance_rate or 0):.0f}%, "
            f"{spec.tokens_per_pass:.2f} tokens per target pass"
        )
        if colour:
            console.note("coloured text: proposed by the draft and kept by the target")
        if ratio < 1:
            console.note(
                "the draft did not pay off here: on a few CPU cores the draft's own cost and the larger verify "
                "batch outweigh the saved passes; GPUs and bigger targets change that (measure with your models)"
            )
        return EXIT_OK
    finally:
        engine.close()
