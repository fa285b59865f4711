"""Is specdec's `--no-draft` baseline as fast as llama-cpp-python's own generation?

Speedups are only honest against an honest baseline. This runs the same prompt tokens,
greedy, through llama-cpp-python's high-level `Llama.generate` and through specdec's engine
without a draft, alternating, in one process, and prints decode tokens/s of both and their
ratio per round.

    python scripts/checks/baseline_check.py [--target T.gguf] [-n 128] [--rounds 3]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared.script_io import Parser, demo_models  # noqa: E402

from specdec_cli.engine.decode.engine import Engine, EngineOptions, GenOptions  # noqa: E402
from specdec_cli.engine.llama.library import default_threads  # noqa: E402

PROMPT = "Write a Python function that checks whether a number is prime."


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--target")
    ap.add_argument("-n", "--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ctx", type=int, default=2048)
    args = ap.parse_args()
    demo_models(args, draft=False)

    import llama_cpp

    threads = default_threads()
    ours = Engine(args.target, None, options=EngineOptions(n_ctx=args.ctx, threads=threads))
    tokens = ours.tokenize_prompt(ours.render_chat([{"role": "user", "content": PROMPT}]))
    theirs = llama_cpp.Llama(model_path=args.target, n_ctx=args.ctx, n_threads=threads, verbose=False)

    def run_theirs() -> tuple[float, int]:
        theirs.reset()
        n, t0 = 0, None
        for tok in theirs.generate(tokens, top_k=1, temp=0.0, reset=True):
            if t0 is None:
                t0 = time.perf_counter()  # after the prompt: time decode only, like specdec
            else:
                n += 1
            if n + 1 >= args.max_tokens or theirs.token_eos() == tok:
                break
        return n / (time.perf_counter() - t0), n + 1

    def run_ours() -> tuple[float, int]:
        res = ours.generate(tokens, GenOptions(max_tokens=args.max_tokens), use_draft=False)
        return res.stats.tokens_per_second, res.stats.n_generated

    run_ours(), run_theirs()  # warm-up
    ratios = []
    print(f"{'round':>5} {'llama-cpp-python tok/s':>23} {'specdec --no-draft tok/s':>25} {'ratio':>6}")
    for r in range(args.rounds):
        a, _ = run_theirs()
        b, _ = run_ours()
        ratios.append(b / a)
        print(f"{r + 1:>5} {a:>23.2f} {b:>25.2f} {b / a:>6.3f}")
    print(f"median ratio specdec/llama-cpp-python: {statistics.median(ratios):.3f}")
    ours.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
