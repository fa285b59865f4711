"""The ceiling of lossless speculation on this machine: a perfect, free draft, against the target alone.

Every token a lossless speculative decoder emits is read by the target, with a logits row to
check it, in some pass. The cheapest that can be is a draft that is always right and costs
nothing, with each pass as large as the context takes: the target reads the prompt and the
output it is going to produce as one long prompt, in n_batch chunks, with a row for every
output token. This script times exactly that against the target alone (no draft, one
prompt at a time, as ``specdec run --parallel 1 --no-draft``), per prompt, in an order reversed
every other prompt. Reading prompts is the same work for every system, every output token
needs its row, and the cheapest rows measured in this project were those in full chunks of one
sequence (rows of several sequences in one pass cost more on a CPU), so no drafter, scheduler
or batch of many prompts has a known way past the ratio. Each reading is timed with flash
attention on and off, and the faster counts. Where the ceiling is below a speed-up someone
asks for, no drafting will reach it on that machine.

    python scripts/speculation_ceiling.py [--sets edit,documents] [-n 300] [--decode-only] [--free-drafts] [--json OUT]

``--decode-only``: the ceiling of decode speed after the prompt (the prompt is read untimed
first), the measure of ``scripts/compare/structured_check.py``. A JSONL line carrying a
``json_schema`` is generated under that schema; then the rows' argmax may differ from the
output where the grammar masked it, and ``agree`` counts that too.

``--free-drafts``: a tighter bound for drafters that cost nothing to ask (n-gram and copy
proposers, the grammar's forced tokens), which is all that can pay where a draft model's step
costs more than the row it saves. The output is read again in the passes such a drafter could
at best make: each pass takes the tokens ahead that a free source would have named
(``_shared/free_guesses.py``) and ends with the first one none names; rows the grammar decides alone
get no logits, as in specdec's loop. No guess is ever wrong there, so no real drafter beats it.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/, for _shared

import numpy as np  # noqa: E402
from _shared.free_guesses import guessable, passes  # noqa: E402
from _shared.prompt_sets import load_items  # noqa: E402
from _shared.script_io import Parser, by_set, demo_models, one_line_errors, positive, write_json  # noqa: E402

from specdec_cli.engine.decode.engine import Engine, EngineOptions, GenOptions  # noqa: E402
from specdec_cli.engine.llama.context import Context, ContextParams  # noqa: E402

READERS = ("auto", "off")  # flash attention as the target runs it by default, and off


def read_known(ctx: Context, prompt: list[int], output: list[int], decode_only: bool,
               passes: list[int] | None = None, decided: list[bool] | None = None) -> tuple[float, int]:
    """Seconds to read ``prompt`` and ``output`` with a logits row for each output token (the row
    before it), and how many rows' argmax is that token. The output is read in full chunks, or
    in ``passes`` (their lengths, in order) as a speculative loop would; ``decided[i]``: output
    token i needs no logits (the grammar allows it alone; its argmax is not checked). With
    ``decode_only`` the prompt is read first, untimed."""
    ctx.kv_clear()
    seq = prompt + output[:-1]
    first = len(prompt) - 1  # the position whose row checks the first output token
    ends, at = [], first
    for n in passes or []:
        at += n
        ends.append(at)
    start = 0
    agree, seconds = 0, 0.0
    while start < len(seq):
        if start >= first and ends:
            stop = ends.pop(0)
        elif start < first and (decode_only or passes):  # the prompt alone, up to the first check
            stop = min(start + ctx.n_batch, first)
        else:
            stop = start + ctx.n_batch
        chunk = seq[start : min(stop, len(seq))]
        checks = [start + i - first for i in range(len(chunk))]  # the output token each row checks
        rows = [c >= 0 and not (decided and decided[c]) for c in checks]
        t0 = time.perf_counter()
        ctx.decode(chunk, start, outputs="all", rows=rows)
        if not (decode_only and start < first):
            seconds += time.perf_counter() - t0  # the passes alone: reading rows back is the agreement check's
        agree += sum(int(np.argmax(ctx.logits(i)) == output[c]) for i, c in enumerate(checks) if rows[i])
        start += len(chunk)
    return seconds, agree


def main() -> int:
    return one_line_errors(measure)


def measure() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", help="target GGUF (default: the pinned demo target)")
    ap.add_argument("--sets", default="edit,documents", help="comma-separated bench scenarios and JSONL files")
    ap.add_argument("--ids", help="only these prompt ids (comma-separated)")
    ap.add_argument("-n", "--max-tokens", type=positive, default=300)
    ap.add_argument("--ctx", type=positive, default=4096)
    ap.add_argument("--decode-only", action="store_true", help="the ceiling of decode speed after the prompt")
    ap.add_argument("--free-drafts", action="store_true",
                    help="also the bound of drafters that cost nothing: passes end where no free guess is right")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    demo_models(args, draft=False)
    prompts = load_items(args.sets)
    if args.ids:
        prompts = [p for p in prompts if str(p[1].id) in set(args.ids.split(","))]
    if not prompts:
        print(f"error: no prompt of {args.sets!r} has an id in --ids {args.ids!r}.", file=sys.stderr)
        return 2
    eng = Engine(str(args.target), None, options=EngineOptions(n_ctx=args.ctx), method=None, warn=print)
    n_batch = eng.target_ctx.n_batch
    readers = {fa: Context(eng.target_model, ContextParams(n_ctx=args.ctx, n_batch=n_batch, n_ubatch=n_batch,
                                                           n_outputs_max=n_batch, flash_attn=fa))
               for fa in READERS}
    grammars: dict[int, object] = {}  # prompt index -> its line's compiled JSON Schema
    if any(item.json_schema is not None for _, item in prompts):
        from specdec_cli.engine.structured import constraint as C
        from specdec_cli.terminal.constraint_args import ConstraintSpec

        tok = C.tokenizer_for(eng.target_model)
        grammars = {i: C.compile_constraint(ConstraintSpec("json_schema", item.json_schema, str(item.id)), tok)
                    for i, (_, item) in enumerate(prompts) if item.json_schema is not None}
    # the first prompt once, untimed, as each system runs it: the first of each ran up to 1.5x
    # slower than the same again (buffers touched for the first time, the clock settling)
    first = eng.tokenize_prompt(eng.render_chat(prompts[0][1].as_messages(None)))
    warm = list(eng.generate(first, GenOptions(max_tokens=args.max_tokens), use_draft=False).tokens)
    for ctx in readers.values():
        read_known(ctx, first, warm or first[-1:], args.decode_only)
    what = "decode after the prompt" if args.decode_only else "prompt and decode"
    print(f"{len(prompts)} prompts, -n {args.max_tokens}; target alone against a perfect free draft ({what})",
          flush=True)
    rows = []
    for i, (set_name, item) in enumerate(prompts):
        pid = str(item.id)
        text = eng.render_chat(item.as_messages(None))
        prompt = eng.tokenize_prompt(text)
        grammar = grammars.get(i)
        eng.target_ctx.kv_clear()  # nothing kept from the last prompt: the reading starts empty too
        alone = eng.generate(prompt, GenOptions(max_tokens=args.max_tokens, grammar=grammar), use_draft=False)
        st, output = alone.stats, list(alone.tokens)
        if len(output) < 2:
            print(f"{set_name:<10} {pid:<12} left out: the target wrote {len(output)} token(s)", flush=True)
            continue
        # the target's time, as its stats count it: decode, or prompt reading and decode
        base = st.decode_seconds + (0.0 if args.decode_only else st.prompt_seconds)
        row = {"set": set_name, "id": pid, "n_prompt": len(prompt), "n": len(output), "alone_s": base}
        for fa in (READERS if i % 2 == 0 else READERS[::-1]):
            row[fa], row[f"agree_{fa}"] = read_known(readers[fa], prompt, output, args.decode_only)
        row["ceiling"] = base / min(row[fa] for fa in READERS)
        free = ""
        if args.free_drafts:
            guessed, decided = guessable(eng.target_model, text, prompt, output,
                                         eng.constraint(grammar) if grammar is not None else None)
            row["passes"] = passes(guessed, n_batch)
            for fa in (READERS if i % 2 == 0 else READERS[::-1]):
                row[f"free_{fa}"] = read_known(readers[fa], prompt, output, args.decode_only, row["passes"], decided)[0]
            row["free_s"] = min(row[f"free_{fa}"] for fa in READERS)
            row["free"] = base / row["free_s"]
            free = (f" | free drafts: {len(row['passes'])} passes, {sum(guessed)}/{len(output)} guessable, "
                    f"{row['free_s']:6.2f} s, bound {row['free']:.2f}x")
        rows.append(row)
        print(f"{set_name:<10} {pid:<12} prompt {len(prompt):5d} out {len(output):4d} | alone {base:7.2f} s | "
              f"perfect draft {row['auto']:6.2f} s (flash attention off {row['off']:6.2f} s) | "
              f"argmax agrees {row['agree_auto']}/{len(output)} | ceiling {row['ceiling']:.2f}x{free}", flush=True)
    print()
    for set_name, rs in by_set(rows):
        total = sum(r["alone_s"] for r in rs)
        best = sum(min(r[fa] for fa in READERS) for r in rs)
        print(f"{set_name:<10} the whole set {total:.1f} s alone, {best:.1f} s at best: ceiling {total / best:.3f}x "
              f"(per prompt median {statistics.median(r['ceiling'] for r in rs):.3f}x, "
              f"{min(r['ceiling'] for r in rs):.2f}-{max(r['ceiling'] for r in rs):.2f})")
        if args.free_drafts:
            free = sum(r["free_s"] for r in rs)
            print(f"{'':<10} free drafts at best {free:.1f} s: bound {total / free:.3f}x (per prompt median "
                  f"{statistics.median(r['free'] for r in rs):.3f}x, "
                  f"{min(r['free'] for r in rs):.2f}-{max(r['free'] for r in rs):.2f})")
    if args.json:
        return write_json(args.json, {"args": vars(args), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
