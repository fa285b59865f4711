"""Where an agent loop's copies break, and whether the draft model sees a break coming at a price that pays.

On the agent loop (``serving/agent_loop.py``, run in process by ``loop_passes.py``) the later turns
rewrite a file an earlier turn wrote. The copy proposers (the suffix index, else the edit
tracker) name the next token almost everywhere; where that token is wrong the copy *breaks*
(the model writes its edit), and a draft that runs past a break wastes the rest of its rows.
A drafter that ended every draft at the break would read these turns in a few long passes
(``loop_passes.py --free-drafts``); this script asks what could tell a drafter where the
breaks are, from the saved outputs of ``loop_passes.py --json`` runs:

- the run length: of the places where the copy has been right for n tokens, how many see a
  break within the next 32 tokens (the copy's own signal, by the length of its run);
- the draft model, teacher-forced over each turn's prompt and output in one batched read: at
  the breaks, how often its most likely token differs from the copy's (and is the output's),
  and where the copy is right, how often it differs anyway (a false alarm). A detector that
  cut drafts where the draft model disagrees would have to read its logits at every proposed
  row, so
- the price of that read: a pass of 64 and of 128 rows at the turns' depth, every row's
  logits read, for the target and for the draft model, timed here, interleaved.

    python3 scripts/ceilings/copy_breaks.py RUN.json [RUN.json...] [-t T.gguf] [-d D.gguf] [--from-turn 1]
                                   [--json OUT]

One sequence and greedy outputs throughout; the saved runs' outputs are read as they are (no
generation), so a run's near-ties do not matter here.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared.script_io import Parser, demo_models, one_line_errors, positive, write_json  # noqa: E402
from loop_passes import read_runs, turn_prompt  # noqa: E402

from specdec_cli.engine.decode.engine import Engine, EngineOptions  # noqa: E402
from specdec_cli.engine.drafters.edits import EditTracker  # noqa: E402
from specdec_cli.engine.drafters.suffix import OutputPool, SuffixIndex  # noqa: E402
from specdec_cli.engine.errors import PromptTooLong  # noqa: E402
from specdec_cli.engine.llama.context import Context, ContextParams  # noqa: E402
from specdec_cli.engine.llama.model import Model  # noqa: E402

HORIZON = 32  # a place "sees a break" when one falls within this many tokens of it
RUN_BUCKETS = (0, 1, 4, 16, 32, 64)  # lower edges of the run-length rows of the table
CHUNK = 256  # tokens per pass of the teacher-forced read
COST_ROWS = (16, 64, 128)  # pass sizes whose cost per row is timed
COST_REPEATS = 3


def copy_tokens(prompt: list[int], output: list[int], pool: OutputPool, rules: EditTracker) -> list[int | None]:
    """Per output place, the copy's next token as auto's proposers would name it, given the true
    output before it: the suffix index's first token, else the edit tracker's; None where neither
    names one. The output then joins ``pool`` (later turns copy from it, as in the scheduler)."""
    index, edits = SuffixIndex(pool), EditTracker(rules)
    index.begin(prompt)
    edits.begin(prompt)
    history, named = list(prompt), []
    for token in output:
        proposed = index.propose(history, 1)[0]
        if not proposed:
            edits.update(history)
            proposed = [d.token for d in edits.propose(1)]
        named.append(proposed[0] if proposed else None)
        history.append(token)
    index.extend(history)
    index.finish()
    return named


def teacher_forced_argmax(ctx: Context, prompt: list[int], output: list[int]) -> list[int]:
    """The model's most likely token at each output place, reading prompt + output in batched
    passes: ``[i]`` is its guess for ``output[i]`` after the true tokens before it."""
    tokens = prompt + output
    ctx.kv_clear()
    first = len(prompt) - 1  # the row whose logits guess output[0]
    guesses = []
    for start in range(0, len(tokens) - 1, CHUNK):
        chunk = tokens[start : min(start + CHUNK, len(tokens) - 1)]  # the last token's guess is never needed
        outs = [start + j >= first for j in range(len(chunk))]
        ctx.decode_many(chunk, list(range(start, start + len(chunk))), [0] * len(chunk), outs)
        guesses += [int(np.argmax(ctx.logits(j))) for j, o in enumerate(outs) if o]
    return guesses


def tally(output: list[int], named: list[int | None], guesses: list[int]) -> dict:
    """Counts over one turn: the breaks, what the draft model said at them and where the copy is
    right, and per run length how many places see a break within ``HORIZON`` tokens."""
    breaks = [n is not None and n != t for n, t in zip(named, output)]
    c = {"tokens": len(output), "named": sum(n is not None for n in named), "breaks": sum(breaks),
         "break_differs": 0, "break_right": 0, "right_differs": 0,
         "by_run": {b: [0, 0] for b in RUN_BUCKETS}}  # run bucket -> [places, places seeing a break]
    run = 0
    for i, (n, t) in enumerate(zip(named, output)):
        if n is None:
            run = 0
            continue
        differs = guesses[i] != n
        if breaks[i]:
            c["break_differs"] += differs
            c["break_right"] += guesses[i] == t
        else:
            c["right_differs"] += differs
        cell = c["by_run"][max(b for b in RUN_BUCKETS if b <= run)]
        cell[0] += 1
        cell[1] += any(breaks[i : i + HORIZON])
        run = 0 if breaks[i] else run + 1
    return c


def merged(tallies: list[dict]) -> dict:
    total = {k: sum(t[k] for t in tallies) for k in tallies[0] if k != "by_run"}
    total["by_run"] = {b: [sum(t["by_run"][b][j] for t in tallies) for j in (0, 1)] for b in RUN_BUCKETS}
    return total


def row_costs(contexts: dict[str, Context], depth: int, text: list[int]) -> dict[str, dict[int, float]]:
    """Milliseconds per row of a pass of each ``COST_ROWS`` size at ``depth``, every row's logits
    read, per model; the models alternate pass by pass (this machine drifts over minutes). The
    passes carry ``text`` (a turn's tokens, repeated as needed)."""
    filler = [text[i % len(text)] for i in range(depth + max(COST_ROWS) * COST_REPEATS)]
    for ctx in contexts.values():
        ctx.kv_clear()
        for start in range(0, depth, CHUNK):
            chunk = filler[start : min(start + CHUNK, depth)]
            ctx.decode_many(chunk, list(range(start, start + len(chunk))), [0] * len(chunk),
                            [False] * (len(chunk) - 1) + [True])
    times: dict[str, dict[int, list[float]]] = {name: {r: [] for r in COST_ROWS} for name in contexts}
    for rep in range(COST_REPEATS):
        for rows in COST_ROWS if rep % 2 == 0 else COST_ROWS[::-1]:
            for name, ctx in contexts.items():
                toks = filler[depth + rep * rows : depth + (rep + 1) * rows]
                t0 = time.perf_counter()
                ctx.decode_many(toks, list(range(depth, depth + rows)), [0] * rows, [True] * rows)
                for j in range(rows):
                    np.argmax(ctx.logits(j))
                times[name][rows].append(time.perf_counter() - t0)
                ctx.seq_rm(0, depth, -1)
    return {name: {r: 1e3 * statistics.median(ts) / r for r, ts in by.items()} for name, by in times.items()}


def analyse(engine: Engine, draft: Model, runs: list[dict], from_turn: int, ctx_size: int) -> dict:
    """Every turn from ``from_turn`` on of every saved run: the tallies, merged, and the costs."""
    if draft.n_vocab != engine.target_model.n_vocab:  # its guesses are read as the target's token ids
        raise ValueError(f"the draft's vocabulary has {draft.n_vocab} tokens, the target's "
                         f"{engine.target_model.n_vocab}. Pass a draft made for this target.")
    params = ContextParams(n_ctx=ctx_size, n_batch=CHUNK, n_ubatch=CHUNK, n_outputs_max=max(CHUNK, *COST_ROWS))
    draft_ctx = Context(draft, params)
    target_ctx = Context(engine.target_model, params)
    tallies, depths, text = [], [], []
    try:
        for run in runs:
            pool, rules = OutputPool(), EditTracker()
            for r in sorted(run["turns"], key=lambda r: (r["turn"], r["session"])):
                try:
                    _, prompt = turn_prompt(engine, run, r)
                except PromptTooLong as e:  # said with --ctx, not the engine's own context size
                    raise ValueError(f"session {r['session']}'s turn {r['turn']} has a prompt of {e.needed} tokens, "
                                     f"more than --ctx {ctx_size}. Pass a larger --ctx.") from None
                named = copy_tokens(prompt, r["output"], pool, rules)
                if r["turn"] < from_turn or len(r["output"]) < 2:
                    continue
                if len(prompt) + len(r["output"]) > ctx_size:
                    raise ValueError(f"session {r['session']}'s turn {r['turn']} holds {len(prompt) + len(r['output'])} "
                                     f"tokens, more than --ctx {ctx_size}. Pass a larger --ctx.")
                tallies.append(tally(r["output"], named, teacher_forced_argmax(draft_ctx, prompt, r["output"])))
                depths.append(len(prompt) + len(r["output"]) // 2)
                text = text or prompt + r["output"]
        if not tallies:
            raise ValueError(f"no saved turn is at --from-turn {from_turn} or later. Pass a smaller --from-turn.")
        depth = round(statistics.mean(depths))
        costs = row_costs({"target": target_ctx, "draft": draft_ctx}, min(depth, ctx_size - max(COST_ROWS)), text)
    finally:
        draft_ctx.close()
        target_ctx.close()
    return {"turns": len(tallies), "depth": depth, **merged(tallies), "ms_per_row": costs}


def report(a: dict) -> None:
    pct = lambda n, d: f"{100 * n / d:.1f}%" if d else "-"  # noqa: E731
    right = a["named"] - a["breaks"]
    print(f"{a['turns']} turns, {a['tokens']} tokens: the copy names the next token at {a['named']} places and is "
          f"wrong at {a['breaks']} (the breaks)")
    print(f"\n{'run of the copy so far':<24} {'places':>7} {'a break within ' + str(HORIZON):>18}")
    edges = [*RUN_BUCKETS, None]
    for lo, hi in zip(edges, edges[1:]):
        n, seeing = a["by_run"][lo]
        label = f"{lo}" if hi == lo + 1 else f"{lo}-{hi - 1}" if hi else f"{lo}+"
        print(f"{label:<24} {n:7d} {pct(seeing, n):>18}")
    print(f"\nthe draft model (teacher-forced) at the {a['breaks']} breaks: differs from the copy at "
          f"{a['break_differs']} ({pct(a['break_differs'], a['breaks'])}), names the output's token at "
          f"{a['break_right']} ({pct(a['break_right'], a['breaks'])})")
    print(f"where the copy is right ({right} places): differs at {a['right_differs']} "
          f"({pct(a['right_differs'], right)}, false alarms)")
    t, d = a["ms_per_row"]["target"], a["ms_per_row"]["draft"]
    print(f"\nms a row of a pass at depth {a['depth']}, every row's logits read:")
    for rows in COST_ROWS:
        print(f"  {rows:4d} rows: target {t[rows]:6.2f}, draft model {d[rows]:6.2f} ({d[rows] / t[rows]:.2f}x)")


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", metavar="RUN.json", nargs="+", help="the --json of loop_passes.py runs")
    ap.add_argument("-t", "--target")
    ap.add_argument("-d", "--draft")
    ap.add_argument("--from-turn", type=int, default=1, metavar="N", help="read turns N and later (0: all)")
    ap.add_argument("--ctx", type=positive, default=4096, help="context of the teacher-forced read")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()

    def run() -> int:
        runs, error = read_runs(args.runs)
        if error:
            print(error, file=sys.stderr)
            return 2
        demo_models(args)
        engine = Engine(args.target, None, options=EngineOptions(n_ctx=args.ctx), method=None)
        draft = Model(args.draft)
        try:
            a = analyse(engine, draft, runs, args.from_turn, args.ctx)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        finally:
            draft.close()
            engine.close()
        report(a)
        return write_json(args.json, {"args": vars(args), **a}) if args.json else 0

    return one_line_errors(run)


if __name__ == "__main__":
    sys.exit(main())
