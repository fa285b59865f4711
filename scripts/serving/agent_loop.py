"""An agent loop against OpenAI-compatible servers, side by side: time to first token and time per turn.

Each session is a scripted coding conversation: the user asks for a file, then each later turn
sends back a tool result (a failing test, a rename request) and asks for the whole file again,
so every turn resends the conversation so far and the answer rewrites text an earlier answer
wrote, which is the shape of an agent editing code. K sessions run at once (threads), greedy.

Two shapes of traffic:

- **fixed** (the default): every answer is cut at ``-n`` tokens (400), so the sessions' turns
  start close together, in phase.
- **out of phase** (``--natural``): answers end where the model ends them (``-n`` is only a
  ceiling, 2048 unless given), session k starts ``k * --stagger`` seconds late, and each session
  waits a while between turns, as a tool runs (up to ``--think`` seconds, the same pseudo-random
  pauses for every system), so one session's next turn arrives while another is still writing.
  This is where a server's time to first token shows: the new turn must be read beside a
  neighbour that decodes.

``--context-tokens N`` opens each session as a coding agent does: a system prompt of instructions
and this repository's docs (about three quarters of N tokens, the same for every session, as an
agent's is) and, before the task, a project file of the session's own (the rest), so that each
conversation is about N tokens long before its first answer: more sessions than a server keeps
sequences for show what its prompt cache restores (``docs/serving.md``, "The prompt cache").

``--tasks holdout`` runs another set of sessions (other languages and files, other edits), kept
out of every tuning of specdec: a figure from it was not shaped by it. ``--sessions 4`` runs four
sessions, each with its own task.

    python3 scripts/serving/agent_loop.py --rounds 2 --sessions 2 --turns 3 --natural --tasks holdout \\
        --system "llama-2::llama-server -m T -np 2 -c 16384 --port {port} -t 2" \\
        --system "llama-2-ngram16::llama-server -m T -np 2 -c 16384 --port {port} -t 2 --spec-type ngram-mod ..." \\
        --system "specdec::python3 -m specdec_cli serve -t T -d D --port {port}" --json out.json

Every system is a command line with ``{port}``: the script starts it, waits for /health, runs the
sessions, and stops it (SIGINT, then SIGKILL after 60 s). The order of the systems reverses every
other round, since the machine drifts by +-10% over minutes. Reported per system: the median time
to first token of each turn (from the request to the first content chunk), the median time of each
turn, the wall time of all sessions, the tokens generated (from the usage chunk), and the median
time to first token from the second turn on (the turns that arrive while others decode).
"""

from __future__ import annotations

import functools
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared.agent_tasks import TASK_SETS  # noqa: E402
from _shared.systems import (  # noqa: E402
    alternating,
    loop_parser,
    run_system,
    save_runs,
    stream_turn,
    systems_of,
    turn_cells,
    turn_columns,
)

REPO = Path(__file__).resolve().parents[2]
CHARS_PER_TOKEN = 3.3  # about what Qwen2.5's tokenizer makes of this repository's English and Python


def agent_context(k: int, tokens: int) -> list[dict]:
    """Session ``k``'s opening before its task: a system prompt shared by every session (instructions
    and the project's docs, about three quarters of ``tokens``) and a project file of its own (the rest)."""
    docs = "".join(f.read_text(encoding="utf-8") for f in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])
    shared = int(0.75 * tokens * CHARS_PER_TOKEN)
    system = ("You are a coding agent. Follow the project's conventions, described in its documentation below.\n\n"
              + docs)[:shared]
    sources = sorted((REPO / "specdec_cli").rglob("*.py"), key=lambda f: -f.stat().st_size)
    own = sources[k % len(sources)]
    head = f"The project file {own.relative_to(REPO)}, for reference:\n\n" + own.read_text(encoding="utf-8")
    return [{"role": "system", "content": system},
            {"role": "user", "content": head[: int(0.25 * tokens * CHARS_PER_TOKEN)]}]


def session(url: str, k: int, turns: int, n: int, *, tasks: str = "tuning", stagger: float = 0.0,
            think: float = 0.0, context_tokens: int = 0) -> list[dict]:
    """Session ``k``'s turns: it starts ``k * stagger`` seconds late and pauses before each later turn
    (a tool running) for a time drawn from ``[0, think]`` by its own seed, the same for every system."""
    asks, tool_turns = TASK_SETS[tasks]
    pauses = random.Random(1000 + k)
    opening = agent_context(k, context_tokens) if context_tokens else []
    if opening:  # the file, then the task, in one user message
        opening[-1]["content"] += "\n\n" + asks[k % len(asks)]
    messages = opening or [{"role": "user", "content": asks[k % len(asks)]}]
    out = []
    time.sleep(k * stagger)
    for t in range(turns):
        if t > 0:
            time.sleep(pauses.uniform(0.0, think))
            messages.append({"role": "user", "content": tool_turns[(t - 1) % len(tool_turns)]})
        res = stream_turn(url, messages, n)
        messages.append({"role": "assistant", "content": res.pop("text")})
        out.append({"session": k, "turn": t, **res})
    return out


def later_ttft(turns: list[dict]) -> float:
    """The median time to first token from each session's second turn on."""
    later = [x["ttft"] for x in turns if x["turn"] > 0 and x["ttft"] is not None]
    return statistics.median(later) if later else float("nan")


def main() -> int:
    ap = loop_parser(__doc__.splitlines()[0], None, "/tmp/agent_loop.log",
                     "tokens per answer: where fixed answers are cut (400); a ceiling under --natural (2048)")
    ap.add_argument("--natural", action="store_true",
                    help="answers end where the model ends them, sessions out of phase (--stagger, --think)")
    ap.add_argument("--stagger", type=float, default=None, help="seconds between sessions' starts (--natural: 3)")
    ap.add_argument("--think", type=float, default=None,
                    help="most seconds a session pauses between turns (--natural: 2)")
    ap.add_argument("--context-tokens", type=int, default=0,
                    help="open each session with an agent's system prompt and a project file of its own, "
                         "about this many tokens in all (0: the task alone)")
    ap.add_argument("--tasks", choices=sorted(TASK_SETS), default="tuning",
                    help="the sessions' tasks: the tuning set, or the held-out set never tuned on")
    args = ap.parse_args()
    n = args.max_tokens or (2048 if args.natural else 400)
    stagger = args.stagger if args.stagger is not None else (3.0 if args.natural else 0.0)
    think = args.think if args.think is not None else (2.0 if args.natural else 0.0)
    if stagger < 0 or think < 0 or n < 1 or args.context_tokens < 0:
        ap.error("--stagger and --think take seconds of at least 0, -n a count of at least 1, "
                 "--context-tokens at least 0")
    play = functools.partial(session, tasks=args.tasks, stagger=stagger, think=think,
                             context_tokens=args.context_tokens)
    systems = systems_of(ap, args.system)
    runs: list[dict] = []
    with open(args.log, "w") as log:
        for r, label, cmd in alternating(systems, args.rounds):
            res = run_system(label, cmd, args.sessions, args.turns, n, log, play=play)
            res["round"] = r
            runs.append(res)
            cut = sum(x["finish"] == "length" for x in res["turns"])
            print(f"round {r} {label:<20} wall {res['wall']:8.2f} s  tokens {res['n_gen']:5d}  "
                  f"ttft (turn 2+) median {later_ttft(res['turns']):6.2f} s  cut at -n: {cut}", flush=True)
    print()
    print(f"{'system':<20} {'wall s (mean)':>14} {'tokens':>7} {'ttft 2+':>8} " + turn_columns(args.turns, "ttft"))
    for label, _ in systems:
        mine = [x for x in runs if x["label"] == label]
        turns = [t for x in mine for t in x["turns"]]
        print(f"{label:<20} {statistics.mean(x['wall'] for x in mine):14.2f} "
              f"{round(statistics.mean(x['n_gen'] for x in mine)):7d} {later_ttft(turns):8.2f} "
              + turn_cells(turns, args.turns, "ttft"))
    save_runs(args.json, args, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
