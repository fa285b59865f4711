"""Where an agent loop's time goes on specdec's scheduler: the loop of ``serving/agent_loop.py``, run in process.

The sessions and turns of ``agent_loop.py`` (its tasks and tool turns, greedy) go straight to the
scheduler that ``specdec serve`` runs, set as serve sets it (auto, first tokens first, two
sequences per session's worth of cells, each in a KV stream of its own), with no HTTP in
between: each session's next turn is submitted the moment its last one ends. The machine runs one pass at a time, so the loop's wall
time is the sum of its passes; every pass is timed and put in a class (plain or drafted, how many
sequences, reading a prompt or not), and the classes are printed with their time, tokens, rows
and the rows a rejected draft wasted. Per turn: its time, time to first token, drafted and kept.

``--turns-out FILE`` writes each turn's conversation (the messages up to that turn's request) as
JSONL, so the bound of any drafter on exactly these turns can be read with
``speculation_ceiling.py --sets FILE --decode-only --free-drafts -n N``: each turn alone.

``--free-drafts RUN.json...`` reads that bound on this scheduler instead, with the sessions
sharing its passes: the loop runs again with auto's proposers replaced by one that knows the
outputs saved by earlier runs' ``--json`` and proposes, of each, only the tokens a drafter that
costs nothing could have guessed (``_shared/free_guesses.py``): the whole run of them ahead, up to
``--draft-max``, every one right. A turn follows whichever saved output its own still agrees
with; where it leaves them all (a near-tie decided the other way under another batch shape),
it gets no more free drafts, and the run says how many tokens that left out, so pass this run's
own ``--json`` back in beside the others and run again. ``--free-from-turn N`` sends no draft on
each session's first N turns: the bound of a drafter that is never wrong where there is a copy
and silent where there is none (on this loop's first turn, new code, the suffix index names the
right token at about half the places it names any). ``--pass-rows N`` cuts the free drafts of a
pass, longest first, to N rows in all: llama.cpp's CPU attention reads a pass in tiles of 64 rows.

    python3 scripts/ceilings/loop_passes.py [-t T.gguf] [-d D.gguf] [--sessions 2] [--turns 3] [-n 400]
                                   [--draft-max 32] [--turns-out turns.jsonl] [--json OUT]
                                   [--free-drafts RUN.json... [--free-from-turn N] [--pass-rows N]]
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared.agent_tasks import TASKS, TOOL_TURNS  # noqa: E402
from _shared.free_guesses import guessable  # noqa: E402
from _shared.script_io import Parser, demo_models, one_line_errors, positive, write_json  # noqa: E402

from specdec_cli.engine.decode.engine import AUTO_DRAFT_MAX, DraftOptions, Engine, EngineOptions, GenOptions  # noqa: E402
from specdec_cli.engine.decode.scheduler import Job  # noqa: E402
from specdec_cli.engine.drafters.draft import Draft  # noqa: E402
from specdec_cli.engine.verify.verifiers import Proposal  # noqa: E402


class PassLog:
    """Every pass of the scheduler's context: rows, seconds, and per sequence what it drafted and got."""

    def __init__(self, scheduler):
        self.passes: list[dict] = []
        ctx, keep = scheduler.ctx, scheduler.keeper.keep
        decode_many = ctx.decode_many

        def timed(toks, pos, seqs, outs, pad=0):
            t = time.perf_counter()
            filler = decode_many(toks, pos, seqs, outs, pad=pad)
            # rows: what the pass ran, filler included (``CostModel.pass_size``); tokens: what it carried
            self.passes.append({"rows": len(toks) + filler, "tokens": len(toks), "seconds": time.perf_counter() - t,
                                "seqs": []})
            return filler

        def verified(s, d, *rest):
            job, held, said = s.job.index, len(s.tokens), len(s.output)
            reason = keep(s, d, *rest)  # (job, drafted, kept, emitted)
            self.passes[-1]["seqs"].append((job, len(d.proposal.tokens), len(s.tokens) - held - 1, len(s.output) - said))
            return reason

        ctx.decode_many = timed
        scheduler.keeper.keep = verified

    def classes(self) -> dict[str, dict]:
        out: dict[str, dict] = defaultdict(lambda: {"passes": 0, "seconds": 0.0, "tokens": 0, "rows": 0, "wasted": 0})
        for p in self.passes:
            seqs = p["seqs"]
            drafted = sum(d for _, d, _, _ in seqs)
            decoding_rows = sum(1 + d for _, d, _, _ in seqs)
            kind = f"{'drafted' if drafted else 'plain'}, {len(seqs)} seq" + (
                ", reads a prompt" if p["tokens"] > decoding_rows or not seqs else "")
            c = out[kind]
            c["passes"] += 1
            c["seconds"] += p["seconds"]
            c["tokens"] += sum(said for _, _, _, said in seqs)
            c["rows"] += p["rows"]
            c["wasted"] += sum(d - kept for _, d, kept, _ in seqs)
        return dict(sorted(out.items()))


class FreeDrafts:
    """In place of the scheduler's per-pass drafting: each turn's output as saved runs wrote it, of
    which each sequence proposes the guessable tokens ahead (``free_guesses.guessable``), up to its
    cap: the bound of drafters that cost nothing, on this scheduler's passes."""

    def __init__(self, engine: Engine, saved: list[dict], from_turn: int = 0, pass_rows: int | None = None):
        """``saved``: one or more runs' ``--json``; a turn follows whichever of their outputs its
        own still agrees with (near-ties go either way with the batch shape). ``pass_rows``: the
        drafts of a pass cut, longest first, so that the pass carries at most that many rows."""
        self.from_turn = from_turn
        self.pass_rows = pass_rows
        self.known: dict[tuple[int, int], list[tuple[list[int], list[bool]]]] = {}
        for run in saved:
            for r in run["turns"]:
                key = (r["session"], r["turn"])
                if any(r["output"] == out for out, _ in self.known.get(key, [])):
                    continue
                text, prompt = turn_prompt(engine, run, r)
                guessed, _ = guessable(engine.target_model, text, prompt, r["output"])
                self.known.setdefault(key, []).append((r["output"], guessed))
        self.turn: dict[int, int] = {}  # session -> the turn it runs: run_loop's, given at install
        self.unreached: dict[tuple[int, int], int] = {}  # turns that left every saved output: tokens after

    def install(self, scheduler, turn: dict[int, int]) -> None:
        self.turn = turn
        scheduler.drafter.draft = self.draft

    def draft(self, seqs: list, caps: list[int], _n_prefill: int) -> list[Draft]:
        out = [self._free(s, c) for s, c in zip(seqs, caps)]
        if self.pass_rows is None:
            return out
        lengths = [len(d.proposal.tokens) for d in out]
        while sum(lengths) + len(seqs) > self.pass_rows and max(lengths) > 0:
            lengths[lengths.index(max(lengths))] -= 1
        return [Draft(d.proposal.truncated(k), "free", [], []) if k else Draft.nothing()
                for d, k in zip(out, lengths)]

    def _free(self, s, cap: int) -> Draft:
        key = (s.job.index, self.turn[s.job.index])
        if key[1] < self.from_turn:
            return Draft.nothing()
        said = s.tokens[s.n_prompt:]  # generated so far, the token this pass evaluates included
        j, tokens = len(said), []
        agree = [(out, g) for out, g in self.known[key] if out[:j] == said]
        if not agree:
            self.unreached.setdefault(key, max(0, max(len(out) for out, _ in self.known[key]) - j))
            return Draft.nothing()
        output, guessed = agree[0]
        while len(tokens) < cap and j + len(tokens) < len(output) and guessed[j + len(tokens)]:
            tokens.append(output[j + len(tokens)])
        return Draft(Proposal(tokens), "free", [], []) if tokens else Draft.nothing()


def turn_prompt(engine: Engine, run: dict, turn: dict) -> tuple[str, list[int]]:
    """The prompt a saved run's ``turn`` (a row of its "turns") was generated from, as text and tokens:
    its request's messages, rendered as run_loop submitted them."""
    text = engine.render_chat(run["requests"][str(turn["session"])][turn["turn"]]["messages"])
    return text, engine.tokenize_prompt(text)


def read_runs(paths: list[str]) -> tuple[list[dict], str | None]:
    """Saved runs (this script's ``--json``, each turn's output and request in it), or the one-line
    error that says which file is missing or is something else."""
    runs = []
    for path in paths:
        try:
            run = json.loads(Path(path).read_text())
            if "requests" not in run or not all("output" in r for r in run["turns"]):
                raise ValueError
        except OSError as e:
            return [], f"error: cannot read {path}: {e.strerror}."
        except (ValueError, KeyError, TypeError):
            return [], (f"error: {path} is not the --json of a loop_passes.py run. "
                        "Run it once with --json RUN.json, then pass that file.")
        runs.append(run)
    return runs, None


def run_loop(engine: Engine, sessions: int, turns: int, n: int, free: FreeDrafts | None = None
             ) -> tuple[float, list[dict], PassLog, dict]:
    scheduler = engine.scheduler(GenOptions(max_tokens=n), n_parallel=sessions, first_tokens_first=True)
    scheduler.start()
    warm = engine.tokenize_prompt(engine.render_chat([{"role": "user", "content": "Hello"}]))
    scheduler.submit(Job(index=-1, prompt=warm, gen=GenOptions(max_tokens=2)))  # as agent_loop warms a server
    while scheduler.busy:
        scheduler.step()
    log = PassLog(scheduler)
    messages = {k: [{"role": "user", "content": TASKS[k % len(TASKS)]}] for k in range(sessions)}
    turn = dict.fromkeys(range(sessions), 0)
    if free is not None:
        free.install(scheduler, turn)
    started: dict[int, float] = {}
    requests: dict[int, list[dict]] = {}

    def submit(k: int) -> None:
        requests.setdefault(k, []).append({"messages": list(messages[k])})
        started[k] = time.perf_counter()
        scheduler.submit(Job(index=k, prompt=engine.tokenize_prompt(engine.render_chat(messages[k]))))

    t0 = time.perf_counter()
    for k in range(sessions):
        submit(k)
    rows = []
    while scheduler.busy:
        for job, res in scheduler.step():
            k, st = job.index, res.stats
            rows.append({"session": k, "turn": turn[k], "seconds": time.perf_counter() - started[k],
                         "ttft": st.first_token_seconds, "n_prompt": st.n_prompt, "reused": st.n_prompt_reused,
                         "n": st.n_generated, "drafted": st.n_drafted, "kept": st.n_accepted,
                         "output": list(res.tokens)})
            messages[k].append({"role": "assistant", "content": res.text})
            turn[k] += 1
            if turn[k] < turns:
                messages[k].append({"role": "user", "content": TOOL_TURNS[(turn[k] - 1) % len(TOOL_TURNS)]})
                submit(k)
    return time.perf_counter() - t0, rows, log, requests


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("-t", "--target")
    ap.add_argument("-d", "--draft")
    ap.add_argument("--sessions", type=positive, default=2)
    ap.add_argument("--turns", type=positive, default=3)
    ap.add_argument("-n", "--max-tokens", type=positive, default=400)
    ap.add_argument("--ctx", type=positive, default=4096, help="one sequence's context, as serve's --ctx")
    ap.add_argument("--draft-max", type=positive, default=AUTO_DRAFT_MAX, help="the longest draft a sequence sends")
    ap.add_argument("--turns-out", help="write each turn's request (its messages) here, as JSONL")
    ap.add_argument("--json", help="write every figure here, each turn's output and request included")
    ap.add_argument("--free-drafts", metavar="RUN.json", nargs="+",
                    help="the bound of free drafters on this scheduler: drafts that know these runs' outputs")
    ap.add_argument("--free-from-turn", type=positive, default=0, metavar="N",
                    help="with --free-drafts: no drafts on each session's first N turns")
    ap.add_argument("--pass-rows", type=positive, metavar="N",
                    help="with --free-drafts: at most N rows a pass, the longest draft cut first")
    args = ap.parse_args()

    def run() -> int:
        if not args.free_drafts and (args.free_from_turn or args.pass_rows):
            print("error: --free-from-turn and --pass-rows shape the free drafts: pass --free-drafts RUN.json too.",
                  file=sys.stderr)
            return 2
        saved, error = read_runs(args.free_drafts or [])
        if error:
            print(error, file=sys.stderr)
            return 2
        if saved:  # every turn of this loop needs a saved output to draft from
            have = {(r["session"], r["turn"]) for run in saved for r in run["turns"]}
            missing = [(k, t) for k in range(args.sessions) for t in range(args.turns) if (k, t) not in have]
            if missing:
                k, t = missing[0]
                print(f"error: no run given to --free-drafts has session {k}'s turn {t}. Pass runs made with at "
                      f"least --sessions {args.sessions} --turns {args.turns}.", file=sys.stderr)
                return 2
        for out in (args.turns_out, args.json):  # a path that cannot be written fails now, not after the run
            if out and not Path(out).resolve().parent.is_dir():
                print(f"error: cannot write {out}: its folder does not exist. Pass a path in a folder that exists.",
                      file=sys.stderr)
                return 2
        demo_models(args)  # the pinned demo pair where -t/-d are not given, fetched once
        engine = Engine(args.target, args.draft, options=EngineOptions(n_ctx=args.ctx, n_seq=2 * args.sessions,
                                                                       kv_streams=True),  # as serve's
                        draft=DraftOptions(draft_max=args.draft_max), method="auto", warn=print)
        engine.ensure_costs()
        free = FreeDrafts(engine, saved, args.free_from_turn, args.pass_rows) if saved else None
        wall, rows, log, requests = run_loop(engine, args.sessions, args.turns, args.max_tokens, free)
        engine.close()
        print(f"{'session':>7} {'turn':>4} {'seconds':>8} {'ttft':>6} {'prompt':>6} {'reused':>6} "
              f"{'tokens':>6} {'drafted':>7} {'kept':>5}")
        for r in sorted(rows, key=lambda r: (r["session"], r["turn"])):
            print(f"{r['session']:7d} {r['turn']:4d} {r['seconds']:8.2f} {r['ttft'] or 0:6.2f} {r['n_prompt']:6d} "
                  f"{r['reused']:6d} {r['n']:6d} {r['drafted']:7d} {r['kept']:5d}")
        classes = log.classes()
        total = sum(c["seconds"] for c in classes.values())
        print(f"\nwall {wall:.2f} s, of which {total:.2f} s in {len(log.passes)} passes:")
        for kind, c in classes.items():
            print(f"  {kind:<30} {c['passes']:4d} passes {c['seconds']:7.2f} s  {c['tokens']:5d} tokens "
                  f"{c['rows']:6d} rows ({1e3 * c['seconds'] / max(1, c['rows']):5.1f} ms a row, "
                  f"{1e3 * c['seconds'] / max(1, c['tokens']):6.1f} ms a token)  {c['wasted']:4d} rows of rejected drafts")
        if free is not None:
            left = ", ".join(f"s{k} t{t}: {n} tokens" for (k, t), n in sorted(free.unreached.items()))
            print(f"free drafts: outputs as saved{'' if not left else ' except after where they left it (' + left + ')'}")
        if args.turns_out:
            try:
                with open(args.turns_out, "w") as f:
                    for k, reqs in requests.items():
                        for t, req in enumerate(reqs):
                            f.write(json.dumps({"id": f"s{k}-t{t}", **req}) + "\n")
            except OSError as e:
                print(f"error: cannot write {args.turns_out}: {e.strerror}.", file=sys.stderr)
                return 1
        if args.json:
            return write_json(args.json, {"args": vars(args), "wall": wall, "turns": rows, "classes": classes,
                                          "passes": log.passes, "requests": requests})
        return 0

    return one_line_errors(run)


if __name__ == "__main__":
    sys.exit(main())
