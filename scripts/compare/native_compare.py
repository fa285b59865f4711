"""specdec's speed next to llama.cpp's own `llama-speculative-simple`, prompt by prompt, in one run.

Both sides get the same models, the same raw prompt text (no chat template; both tokenize
it with the vocabulary's BOS rule and the script checks the token counts agree), greedy
decoding, the same draft settings (draft-max K, draft-min 0 and p-min 0 unless asked:
llama.cpp's draft-simple then proposes its argmax, as specdec does), the same threads
(physical cores), context size, batch sizes, flash-attention setting (auto) and KV types.

    scripts/build_native.sh            # once: builds llama-speculative-simple into ~/.cache
    python scripts/compare/native_compare.py [--target T --draft D] [--draft-max 3] [-n 128] \
        [--prompts-file F] [--repeats 1] [--stat median|best] [--native-bin PATH] [--json OUT]

With no --target/--draft it uses the pinned Qwen2.5-Coder 1.5B/0.5B pair (fetched once).
Without --native-bin it runs scripts/build_native.sh, which prints the cached binary at once
when it is already built (and builds it otherwise). A prompts file holds one prompt per
line: a JSON object with a "prompt" string, a JSON string (for prompts with newlines), or
plain text.

The native side is one `llama-speculative-simple` process per prompt; its "decoded N tokens
in S seconds" line is the decode speed (after the prompt, drafting included), and its
n_drafted/n_accept lines the counts. The specdec side is the Engine in this process,
loaded once and warmed up with one short generation; its speed is
`result.stats.tokens_per_second`, also decode only. The two runs alternate per prompt
(native, specdec, native, specdec, ...) so that drift on the machine hits both.

Timings on a shared machine are noisy: run-to-run spread of 5-10% is common on small CPU
boxes, and a neighbour's job can slow one run tenfold (OpenMP threads that lose their core
stall at every barrier). Quote the median specdec/native ratio, not the absolute tokens/s.
The "others" column gives, per side, how many cores other processes kept busy during the
run (from /proc/stat, minus this run's own CPU time); rows above 0.25 are marked "!".
On a busy machine use --repeats 3 --stat best (the fastest run of each side is the least
disturbed one) and rerun when the table shows marks.

Counts differ a little by construction. speculative-simple stops once it has *more* than -n
tokens, so it emits n+1 up to n+K+1 (an end-of-generation token included), and in its last
step a remaining budget of 0 means "no limit" to draft-simple, so it drafts K; specdec emits
exactly -n and drafts no more than the budget left. The rates are per token, so this does
not bias the ratio; the texts are compared on their common length ("output": same, or the
first character where they part).

Server mode: batch throughput against llama-server (continuous batching over slots)
------------------------------------------------------------------------------------

    scripts/build_native.sh llama-server   # once (the same build also makes llama-server)
    python scripts/compare/native_compare.py server [--target T] [--prompts-file F] [-n 128] \
        [--np 1,4,8] [--spec none,ngram4,ngram16,draft] [--cache-prompt on|off] [--rounds R] \
        [--specdec-cmd "python3 -m specdec_cli run -t T --no-draft --batch {prompts} -n {n} -q"] \
        [--server-bin PATH] [--logs DIR] [--json OUT]

For every slot count N of --np and every setting of --spec, one llama-server per round on
127.0.0.1 (a free port) with the settings above (threads = physical cores, -c = N * --ctx since
llama-server splits -c across its slots, -fa auto, the KV types, -fit off, --metrics), and
  none     no speculation;
  ngramK   llama.cpp's ngram-mod: --spec-type ngram-mod --spec-ngram-mod-n-match 8 (--ngram-match)
           --spec-ngram-mod-n-max K --spec-ngram-mod-n-min 1 (--ngram-min; llama.cpp's default
           n-min 48 is above a small n-max, and such a drafter never proposes anything);
  ngram-simple  llama.cpp's ngram-simple at its defaults (a 12-token lookup, up to 48 drafted);
  draft    the draft model: -md D --spec-type draft-simple --spec-draft-n-max (--draft-max)
           --spec-draft-n-min --spec-draft-p-min, draft threads and KV types as the target's.
Once /health says ok (the model is loaded) and one short warm-up request is answered, every
prompt goes to /completion at once (--in-flight K: K at a time; the server queues what its
slots cannot take): the raw prompt, n_predict -n, temperature 0, cache_prompt as --cache-prompt,
seed fixed. The wall time runs from the first request sent to the last answer received; a
configuration's throughput is the sum of the answers' timings.predicted_n over that wall time,
and draft_n/draft_n_accepted are summed. The server is restarted every round, so no round
starts from another's prompt cache; each specdec run likewise gets an empty prompt cache folder
(``SPECDEC_PROMPT_CACHE``).

The specdec side is a command (--specdec-cmd, repeatable, "LABEL::COMMAND" to name it), run as
a subprocess that prints one JSON line per prompt with n_generated (`specdec run --batch` does).
In it {prompts} becomes a JSONL file of the very prompt texts the server gets ({"id", "prompt"},
chat prompts already rendered, so give no --chat) and {n} the -n value. Its time is the
subprocess's wall time minus model load: when a stdout JSON line or a stderr line carries
`batch_seconds`, that is used as is; otherwise (specdec 0.x prints none) the same command is run
right after on a one-token prompt with -n 1 (via {prompts}/{n}, else by replacing the values of
--batch and -n/--max-tokens) and that run's whole wall time (load, warm-up, exit) is subtracted.
The "note" column says which. Leave out -q: `run --batch` prints its batch time only without it, and the probe's
start-up is not the batch run's (auto's one-prompt probe checks its own costs: 5-11 s here, against a
batch run whose start-up was shorter), so the probe can inflate auto's throughput by half. Give the command its threads (-t) yourself; if specdec measures its
cost curve on the first batch run (`~/.cache/specdec/costs.json`), run it once beforehand or pass
its --parallel, or that measurement lands in the timed batch.

The machine drifts by +-10% over minutes: --rounds R runs every system R times, in reverse order
every other round, and the summary gives the median (and min-max) over the rounds, with each
system's throughput relative to the first one listed. After the table, the script checks that
specdec's prompt token counts equal the server's (cache_n + prompt_n) and counts the outputs that
agree on their common length (batched decoding can change a near-tie greedy pick on either side).

Prompts (both modes): the --prompts-file formats above, plus JSONL lines with "messages" (the
project's specdec_cli/bench/prompts/*.jsonl): those are rendered with the target's own chat
template the way specdec's --chat renders them (its Jinja, else llama.cpp's built-in format;
vocab-only load via llama-cpp-python's low-level API), and sent as raw text.

Session mode (agent-loop shape; llama-server only):

    python scripts/compare/native_compare.py session [--sessions 4] [--turns 3] [--np K] [--spec S] \
        [--prompts-file F] [-n 128] [--json OUT]

K concurrent conversations, each opening with one prompt of the set (messages as they are, or the
prompt as one user message) and going on with fixed follow-up questions; every turn resends the
whole conversation to /v1/chat/completions (streamed, temperature 0). Per turn it records the time
to the first content token and the total time, and the server's prompt_n/cache_n (how much of the
resent conversation came from the slot's cache).

Slot mode (one at a time, interleaved per prompt; llama-server only):

    python scripts/compare/native_compare.py slot [--target T] [--prompts-file F] [-n 160] [--rounds 2]

specdec's target alone (the Engine in this process, no draft: what `run --batch --no-draft
--parallel 1` runs for each line) against llama-server with one slot and no speculation, both
loaded once. Each prompt goes to both, one after the other, in an order that flips every prompt
and every round, so the machine's drift over minutes touches both alike. The server's prompt
cache is off (each request reads its whole prompt, as specdec does). Per prompt it records the
prompt time and the decode time of each side (the server's timings.prompt_ms/predicted_ms,
specdec's stats.prompt_seconds/decode_seconds) and the request's whole time, and reports the
ratios of the summed times, prompt, decode and whole, with the median of the per-prompt ratios.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

# the modes, in compare/native/ beside this file
from native import batch, session, slot, speculative  # noqa: E402


def main() -> int:
    """The mode named first (server, session, slot), else the per-prompt mode."""
    modes = {"server": batch.server_main, "session": session.session_main, "slot": slot.slot_main}
    if len(sys.argv) > 1 and sys.argv[1] in modes:
        return modes[sys.argv[1]](sys.argv[2:])
    return speculative.main(__doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
