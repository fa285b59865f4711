"""Side-by-side speed of the target alone and with its draft, in one process.

A quick three-prompt check (the figures of docs/auto.md, "Fixed draft settings"); `specdec bench` is the full
measurement. Each prompt runs
without and then with the draft after one warm-up, greedy, with the chat template; the
table gives decode tokens/s of both, their ratio, the acceptance rate and tokens per target
pass, and whether the two outputs are identical (or part at a near-tie).

    python scripts/checks/compare_pair.py --target T.gguf --draft D.gguf [--draft-max 4] [--p-min 0.5] [-n 128]

With no --target/--draft it uses the pinned Qwen2.5-Coder 1.5B/0.5B pair (fetched once).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared.script_io import Parser, demo_models  # noqa: E402

from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions  # noqa: E402
from specdec_cli.engine.verify.divergence import first_divergence  # noqa: E402

CODE_PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "Write a JavaScript function that deep-merges two objects.",
    "Write a C function that reverses a singly linked list.",
]


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--target")
    ap.add_argument("--draft")
    ap.add_argument("--draft-max", type=int, default=DraftOptions().draft_max)
    ap.add_argument("--p-min", type=float, default=DraftOptions().p_min)
    ap.add_argument("-n", "--max-tokens", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--prompt", action="append", help="replace the built-in code prompts (repeatable)")
    args = ap.parse_args()
    demo_models(args)
    engine = Engine(
        args.target, args.draft,
        options=EngineOptions(n_ctx=args.ctx),
        draft=DraftOptions(draft_max=args.draft_max, p_min=args.p_min),
    )
    gen = GenOptions(max_tokens=args.max_tokens)
    prompts = args.prompt or CODE_PROMPTS
    encoded = [engine.tokenize_prompt(engine.render_chat([{"role": "user", "content": p}])) for p in prompts]
    engine.generate(encoded[0], GenOptions(max_tokens=16))  # warm-up
    print(f"draft-max {args.draft_max}, p-min {args.p_min}, {args.max_tokens} tokens, greedy")
    print(f"{'prompt':<52} {'alone tok/s':>11} {'draft tok/s':>11} {'ratio':>6} {'accept':>7} {'tok/pass':>8}  output")
    ratios = []
    for text, tokens in zip(prompts, encoded):
        plain = engine.generate(tokens, gen, use_draft=False, trace=True)
        spec = engine.generate(tokens, gen)
        a, b = plain.stats, spec.stats
        ratio = b.tokens_per_second / a.tokens_per_second
        ratios.append(ratio)
        div = first_divergence(plain.tokens, plain.trace, spec.tokens)
        same = "identical" if div is None else f"parts at {div.index} (margin {div.margin:.3f})"
        print(f"{text[:52]:<52} {a.tokens_per_second:>11.2f} {b.tokens_per_second:>11.2f} {ratio:>6.2f} "
              f"{100 * (b.acceptance_rate or 0):>6.1f}% {b.tokens_per_pass:>8.2f}  {same}")
    print(f"median ratio {statistics.median(ratios):.2f}")
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
