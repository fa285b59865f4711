"""specdec's speed next to llama.cpp's own `llama-speculative-simple`, prompt by prompt, in one run.

Both sides get the same models, the same raw prompt text (no chat template; both tokenize
it with the vocabulary's BOS rule and the script checks the token counts agree), greedy
decoding, the same draft settings (draft-max K, draft-min 0 and p-min 0 unless asked:
llama.cpp's draft-simple then proposes its argmax, as specdec does), the same threads
(physical cores), context size, batch sizes, flash-attention setting (auto) and KV types.

    scripts/build_native.sh            # once: builds llama-speculative-simple into ~/.cache
    python scripts/native_compare.py [--target T --draft D] [--draft-max 3] [-n 128] \
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
    python scripts/native_compare.py server [--target T] [--prompts-file F] [-n 128] \
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
starts from another's prompt cache.

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

    python scripts/native_compare.py session [--sessions 4] [--turns 3] [--np K] [--spec S] \
        [--prompts-file F] [-n 128] [--json OUT]

K concurrent conversations, each opening with one prompt of the set (messages as they are, or the
prompt as one user message) and going on with fixed follow-up questions; every turn resends the
whole conversation to /v1/chat/completions (streamed, temperature 0). Per turn it records the time
to the first content token and the total time, and the server's prompt_n/cache_n (how much of the
resent conversation came from the slot's cache).
Slot mode (one at a time, interleaved per prompt; llama-server only):

    python scripts/native_compare.py slot [--target T] [--prompts-file F] [-n 160] [--rounds 2]

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

import argparse
import json
import os
import re
import resource
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from script_io import Parser, demo_models  # noqa: E402

from specdec_cli.engine.llama.library import default_threads  # noqa: E402

# Raw completion prompts (no chat template): code, JSON/tables, prose.
DEFAULT_PROMPTS = [
    ("py-quicksort", 'def quicksort(items):\n    """Sort a list with quicksort and return a new list."""\n'),
    ("js-deepmerge", "// Deep-merge two plain objects; arrays are concatenated.\nfunction deepMerge(a, b) {\n"),
    ("c-linkedlist", "/* Reverse a singly linked list in place and return the new head. */\n"
                     "struct node *reverse(struct node *head) {\n"),
    ("sql-schema", "-- Schema for a small library: authors, books and loans.\nCREATE TABLE authors (\n"),
    ("json-capitals", "A JSON array of the ten largest European capitals, with country and population:\n"
                      '[\n  {"city": "London", "country": "United Kingdom", "population": 8982000},\n'),
    ("md-planets", "| Planet | Mean distance from the Sun (AU) | Known moons |\n|---|---|---|\n"
                   "| Mercury | 0.39 | 0 |\n"),
    ("prose-press", "The invention of the printing press in the fifteenth century changed Europe because"),
    ("prose-howto", "How to make a good cup of tea, step by step.\n\n1."),
]

DISTURBED = 0.25  # cores used by other processes above which a run is flagged as disturbed
RE_ENCODED = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")
RE_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")
RE_COUNT = {k: re.compile(rf"\b{k}\s*=\s*(\d+)") for k in ("n_predict", "n_drafted", "n_accept")}
RE_NCTX = re.compile(r"llama_context: n_ctx\s+=\s+(\d+)")
RE_FA = re.compile(r"llama_context: flash_attn\s+=\s+(\S+)")
RE_FA_RESOLVED = re.compile(r"Flash Attention (enabled|not supported)")
RE_THREADS = re.compile(r"threadpool init, n_threads = (\d+)")
RE_KV = re.compile(r"K \((\w+)\):.*V \((\w+)\)")


@dataclass
class Side:
    tps: float
    n_gen: int
    n_drafted: int
    n_accepted: int
    text: str
    n_prompt: int
    others: float | None = None  # CPU cores other processes kept busy during the run, on average


def print_header(hdr: str) -> None:
    """A table's column line and its rule, flushed so the rows that follow show as they come."""
    print(hdr)
    print("-" * len(hdr))
    sys.stdout.flush()


def load_prompts(path: str | None, target: str | Path | None = None) -> list[tuple[str, str]]:
    """(name, raw text) per prompt. Lines with "messages" are rendered with the target's chat
    template (as specdec's --chat does); without a target they are an error."""
    if not path:
        return DEFAULT_PROMPTS
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        sys.exit(f"error: cannot read the prompts file {path}: {exc.strerror if isinstance(exc, OSError) else exc}")
    out = []
    chats: list[tuple[int, list[dict]]] = []  # (index in out, messages), rendered in one model load
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        text = line
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
            text = obj["prompt"]
            name = str(obj.get("id", f"p{i + 1}"))
        elif isinstance(obj, dict) and isinstance(obj.get("messages"), list):
            chats.append((len(out), obj["messages"]))
            text, name = "", str(obj.get("id", f"p{i + 1}"))
        elif isinstance(obj, str):
            text, name = obj, f"p{i + 1}"
        else:
            name = f"p{i + 1}"
        out.append((name, text))
    if not out:
        sys.exit(f"error: {path} holds no prompts. put one prompt per line.")
    if chats:
        if target is None:
            sys.exit(f"error: {path} holds chat messages; they need the target's chat template (pass --target).")
        texts = render_chats(target, [m for _, m in chats])
        for (k, _), text in zip(chats, texts):
            out[k] = (out[k][0], text)
    return out


def render_chats(model_path: str | Path, conversations: list[list[dict]]) -> list[str]:
    """Each conversation rendered with the model's own chat template and the assistant's opening,
    as specdec's --chat renders it (``specdec_cli.engine.chat.template``: the template's Jinja,
    else llama.cpp's built-in format), from a vocab-only load."""
    import ctypes

    import llama_cpp as ll
    from llama_cpp._logger import set_verbose

    from specdec_cli.engine.chat.template import render

    set_verbose(False)  # llama.cpp's load log, errors aside
    ll.llama_backend_init()
    params = ll.llama_model_default_params()
    params.vocab_only = True
    model = ll.llama_model_load_from_file(str(model_path).encode(), params)
    if not model:
        sys.exit(f"error: llama.cpp could not load {model_path}")
    try:
        tmpl = ll.llama_model_chat_template(model, None)
        if not tmpl:
            sys.exit(f"error: {Path(model_path).name} has no chat template; give raw \"prompt\" lines instead.")
        vocab = ll.llama_model_get_vocab(model)

        def special(token: int) -> str:
            return ll.llama_vocab_get_text(vocab, token).decode("utf-8", errors="replace") if token >= 0 else ""

        def builtin(msgs: list[dict]) -> str:
            keep = [(m["role"].encode(), m["content"].encode()) for m in msgs]
            arr = (ll.llama_chat_message * len(keep))()
            for i, (role, content) in enumerate(keep):
                arr[i].role, arr[i].content = role, content
            cap = sum(len(r) + len(c) for r, c in keep) * 2 + 256
            buf = ctypes.create_string_buffer(cap)
            n = ll.llama_chat_apply_template(tmpl, arr, len(keep), True, buf, cap)
            if n > cap:
                buf = ctypes.create_string_buffer(n)
                n = ll.llama_chat_apply_template(tmpl, arr, len(keep), True, buf, n)
            if n < 0:
                sys.exit(f"error: llama.cpp does not recognise the chat template of {Path(model_path).name}")
            return buf.raw[:n].decode("utf-8", errors="replace")

        out = []
        for msgs in conversations:
            plain = [{"role": str(m["role"]), "content": str(m["content"])} for m in msgs]
            out.append(render(tmpl.decode("utf-8", errors="replace"), plain, bos=special(ll.llama_vocab_bos(vocab)),
                              eos=special(ll.llama_vocab_eos(vocab)), add_generation_prompt=True,
                              builtin=lambda plain=plain: builtin(plain)))
        return out
    finally:
        ll.llama_model_free(model)


def find_native(explicit: str | None, binary: str = "llama-speculative-simple") -> str:
    """The native binary: ``explicit``, else $SPECDEC_NATIVE_BIN (llama-speculative-simple) or
    $SPECDEC_NATIVE_SERVER (llama-server), else what scripts/build_native.sh prints (it builds once)."""
    if explicit:
        return explicit
    env = os.environ.get("SPECDEC_NATIVE_SERVER" if binary == "llama-server" else "SPECDEC_NATIVE_BIN")
    if env:
        return env
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "build_native.sh"), binary],
                          stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        sys.exit(f"error: scripts/build_native.sh {binary} failed. run it by hand to see why.")
    return proc.stdout.strip().splitlines()[-1]


def native_cmd(args, prompt: str) -> list[str]:
    t = str(args.threads)
    return [
        args.native_bin, "-m", str(args.target), "-md", str(args.draft),
        "-p", prompt, "--no-escape", "-n", str(args.max_tokens), "--temp", "0", "-s", str(args.seed),
        "--spec-type", "draft-simple",
        "--spec-draft-n-max", str(args.draft_max), "--spec-draft-n-min", str(args.draft_min),
        "--spec-draft-p-min", str(args.p_min),
        "-t", t, "-tb", t, "-td", t, "-tbd", t,
        "-c", str(args.ctx), "-b", str(args.batch), "-ub", str(args.batch),
        "-fa", args.flash_attn,
        "-ctk", args.cache_type_k, "-ctv", args.cache_type_v,
        "-ctkd", args.cache_type_k, "-ctvd", args.cache_type_v,
        "-ngl", str(args.gpu_layers), "-ngld", str(args.gpu_layers),
        "-fit", "off",  # no silent changes to what was asked: the settings above are the settings
        "-lv", "4",  # llama.cpp's INFO lines (n_ctx, flash attention, KV types) are at trace level here
    ]


def _busy_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (Linux /proc/stat), else None."""
    try:
        with open("/proc/stat") as f:
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _others(busy0: float | None, own_cpu: float, wall: float) -> float | None:
    """Cores kept busy by other processes over ``wall`` seconds: the machine's busy time minus ours."""
    busy1 = _busy_seconds()
    if busy0 is None or busy1 is None or wall <= 0:
        return None
    return max(0.0, (busy1 - busy0 - own_cpu) / wall)


def run_native(args, prompt: str, log_dir: Path | None, tag: str) -> tuple[Side, dict]:
    cmd = native_cmd(args, prompt)
    ru0, busy0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), _busy_seconds(), time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    wall, ru1 = time.perf_counter() - w0, resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    log = proc.stderr
    if log_dir is not None:
        (log_dir / f"{tag}.stderr.log").write_text(log)
        (log_dir / f"{tag}.stdout.txt").write_text(proc.stdout)
    dec, enc = RE_DECODED.search(log), RE_ENCODED.search(log)
    counts = {k: r.search(log) for k, r in RE_COUNT.items()}
    if proc.returncode != 0 or not dec or not enc or not all(counts.values()):
        tail = "\n".join(log.splitlines()[-25:])
        sys.exit(f"error: llama-speculative-simple failed (exit {proc.returncode}):\n{' '.join(cmd[:6])} ...\n{tail}")
    # stdout is "\n\n" + the prompt's pieces + the generated text + "\n\n"
    out = proc.stdout
    out = out[2:] if out.startswith("\n\n") else out
    text = out[len(prompt):] if out.startswith(prompt) else out
    for tail in ("\n\n\n\n", "\n\n"):  # the generation is followed by two LOG("\n\n")
        if text.endswith(tail):
            text = text[: -len(tail)]
            break
    info = {
        "n_ctx": [int(m) for m in RE_NCTX.findall(log)],
        "flash_attn": RE_FA.findall(log),
        "flash_attn_resolved": RE_FA_RESOLVED.findall(log),
        "threads": [int(m) for m in RE_THREADS.findall(log)],
        "kv_types": sorted({f"{k}/{v}" for k, v in RE_KV.findall(log)}),
    }
    side = Side(
        tps=float(dec.group(3)), n_gen=int(dec.group(1)),
        n_drafted=int(counts["n_drafted"].group(1)), n_accepted=int(counts["n_accept"].group(1)),
        text=text, n_prompt=int(enc.group(1)), others=_others(busy0, child_cpu, wall),
    )
    return side, info


def engine_options(args):
    """specdec's engine with the settings both sides get (context, batch, threads, offload, FA, KV types)."""
    from specdec_cli.engine.decode.runner import EngineOptions

    return EngineOptions(n_ctx=args.ctx, n_batch=args.batch, threads=args.threads, gpu_layers=args.gpu_layers,
                         flash_attn=args.flash_attn, cache_type_k=args.cache_type_k, cache_type_v=args.cache_type_v)


def warmed_up(engine, prompts: list[tuple[str, str]]) -> list[list[int]]:
    """The prompts' tokens, after one short generation (pages in the weights, builds the graphs)."""
    from specdec_cli.engine.decode.runner import GenOptions

    encoded = [engine.tokenize_prompt(text) for _, text in prompts]
    engine.generate(encoded[0], GenOptions(max_tokens=16))
    return encoded


def run_specdec(engine, tokens: list[int], n: int) -> Side:
    from specdec_cli.engine.decode.runner import GenOptions

    busy0, cpu0, w0 = _busy_seconds(), time.process_time(), time.perf_counter()
    r = engine.generate(tokens, GenOptions(max_tokens=n))
    others = _others(busy0, time.process_time() - cpu0, time.perf_counter() - w0)
    s = r.stats
    return Side(s.tokens_per_second or 0.0, s.n_generated, s.n_drafted, s.n_accepted, r.text, s.n_prompt, others)


def counts(s: Side) -> str:
    rate = f"{100 * s.n_accepted / s.n_drafted:.0f}%" if s.n_drafted else "-"
    return f"{s.n_gen}/{s.n_drafted}/{s.n_accepted} ({rate})"


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def same_text(a: str, b: str) -> str:
    """'same' when one output is a prefix of the other (native emits a few more tokens)."""
    k = min(len(a), len(b))
    for i in range(k):
        if a[i] != b[i]:
            return f"char {i}"
    return "same"


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--target")
    ap.add_argument("--draft")
    ap.add_argument("--draft-max", type=int, default=3)
    ap.add_argument("--draft-min", type=int, default=0)
    ap.add_argument("--p-min", type=float, default=0.0)
    ap.add_argument("-n", "--max-tokens", type=int, default=128)
    ap.add_argument("--prompts-file")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each prompt on each side")
    ap.add_argument("--stat", choices=["median", "best"], default="median",
                    help="what --repeats keeps per side: the median tok/s, or the best (least disturbed) run")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=512, help="n_batch = n_ubatch on both sides")
    ap.add_argument("--threads", type=int, default=default_threads(), help="default: physical cores")
    ap.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--cache-type-k", default="f16")
    ap.add_argument("--cache-type-v", default="f16")
    ap.add_argument("-ngl", "--gpu-layers", type=int, default=0, help="both models, both sides (default 0: CPU)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--native-bin", help="llama-speculative-simple (default: $SPECDEC_NATIVE_BIN, else build_native.sh)")
    ap.add_argument("--logs", help="keep llama-speculative-simple's logs in this folder")
    ap.add_argument("--json", help="write every run's figures to this file")
    args = ap.parse_args()
    if args.repeats < 1:
        sys.exit("error: --repeats must be at least 1.")
    from specdec_cli.engine.decode.runner import DraftOptions, Engine

    demo_models(args)
    args.native_bin = find_native(args.native_bin)
    log_dir = Path(args.logs) if args.logs else None
    if log_dir:
        log_dir.mkdir(parents=True, exist_ok=True)
    prompts = load_prompts(args.prompts_file, args.target)

    engine = Engine(args.target, args.draft, options=engine_options(args),
                    draft=DraftOptions(draft_max=args.draft_max, draft_min=args.draft_min, p_min=args.p_min))
    encoded = warmed_up(engine, prompts)

    print(f"target {Path(args.target).name}, draft {Path(args.draft).name}")
    print(f"native {args.native_bin}")
    print(f"greedy, raw prompts, -n {args.max_tokens}, draft-max {args.draft_max}, draft-min {args.draft_min}, "
          f"p-min {args.p_min}, threads {args.threads}, ctx {args.ctx}, batch {args.batch}, fa {args.flash_attn}, "
          f"kv {args.cache_type_k}/{args.cache_type_v}, ngl {args.gpu_layers}, repeats {args.repeats} ({args.stat})")
    hdr = (f"{'prompt':<14} {'tok':>4} {'native t/s':>10} {'specdec t/s':>11} {'ratio':>6}  "
           f"{'native gen/drafted/acc':>29}  {'specdec gen/drafted/acc':>29}  {'others':>9}  output")
    print_header(hdr)

    records, ratios, infos = [], [], []
    n_disturbed = 0
    load0 = _load()
    t0 = time.perf_counter()
    for (name, text), tokens in zip(prompts, encoded):
        nat_runs, spd_runs = [], []
        for rep in range(args.repeats):
            nat, info = run_native(args, text, log_dir, f"{name}.{rep}")
            infos.append(info)
            spd = run_specdec(engine, tokens, args.max_tokens)
            if nat.n_prompt != len(tokens):
                print(f"warning: {name}: llama.cpp read {nat.n_prompt} prompt tokens, specdec {len(tokens)}",
                      file=sys.stderr)
            nat_runs.append(nat)
            spd_runs.append(spd)
            records.append({
                "prompt": name, "repeat": rep, "n_prompt_native": nat.n_prompt, "n_prompt_specdec": len(tokens),
                "native": {k: getattr(nat, k) for k in ("tps", "n_gen", "n_drafted", "n_accepted", "others")},
                "specdec": {k: getattr(spd, k) for k in ("tps", "n_gen", "n_drafted", "n_accepted", "others")},
                "native_text": nat.text, "specdec_text": spd.text,
            })
        pick = max if args.stat == "best" else statistics.median
        nat_tps = pick(r.tps for r in nat_runs)
        spd_tps = pick(r.tps for r in spd_runs)
        ratio = spd_tps / nat_tps if nat_tps else float("nan")
        ratios.append(ratio)
        n, s = nat_runs[-1], spd_runs[-1]
        busy = [max(r.others for r in runs) if all(r.others is not None for r in runs) else None
                for runs in (nat_runs, spd_runs)]
        disturbed = any(b is not None and b > DISTURBED for b in busy)
        n_disturbed += disturbed
        others = "/".join("?" if b is None else f"{b:.1f}" for b in busy) + ("!" if disturbed else " ")
        print(f"{name:<14} {len(tokens):>4} {nat_tps:>10.2f} {spd_tps:>11.2f} {ratio:>6.2f}  "
              f"{counts(n):>29}  {counts(s):>29}  {others:>9}  "
              f"{same_text(n.text, s.text)}")
        sys.stdout.flush()

    first = [r for r in records if r["repeat"] == 0]  # the counts repeat run to run: one pass over the prompts
    tot = {side: [sum(r[side][k] for r in first) for k in ("n_drafted", "n_accepted")] for side in ("native", "specdec")}
    print("-" * len(hdr))
    print(f"median ratio specdec/native {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}; {len(ratios)} prompts, {time.perf_counter() - t0:.0f} s; "
          f"1-min load average {load0} at the start, {_load()} at the end, on {os.cpu_count()} CPUs)")
    if n_disturbed:
        print(f"{n_disturbed} row(s) marked ! ran while other processes kept more than {DISTURBED} cores busy "
              f"(the 'others' column, native/specdec); their speeds are not clean. "
              f"--repeats 3 --stat best filters such runs out.")
    for side, (d, a) in tot.items():
        print(f"{side:<8} drafted {d}, accepted {a} ({100 * a / d if d else 0:.1f}%)")
    seen = infos[0]
    print(f"llama.cpp reported (target, draft): n_ctx {seen['n_ctx']}, flash_attn {seen['flash_attn']} "
          f"-> {seen['flash_attn_resolved'] or '?'}, kv {seen['kv_types']}, threadpool {seen['threads']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                               "runs": records, "median_ratio": statistics.median(ratios)},
                                              indent=1))
    engine.close()
    return 0


# --- server mode: batch throughput against llama-server -----------------------------------------

SPEC_RE = re.compile(r"^(none|draft|ngram(\d+)|ngram-simple)$")
FOLLOW_UPS = [  # session mode's later user turns, in turn order (cycled)
    "Now make it shorter and explain the key step in one sentence.",
    "Add error handling for bad input and show the full result again.",
    "Summarise what you did so far as a bulleted list.",
]
PROBE_PROMPT = "Hello"  # specdec's load probe: one prompt of one token, -n 1


@dataclass
class ServerConfig:
    n_slots: int
    spec: str  # "none", "draft" or "ngram<n-max>"

    @property
    def label(self) -> str:
        return f"server np={self.n_slots}" + ("" if self.spec == "none" else f" {self.spec}")


def _int_list(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        sys.exit(f"error: {text!r} is not a comma-separated list of integers.")
    if not out or min(out) < 1:
        sys.exit(f"error: {text!r}: give positive integers.")
    return out


def _spec_list(text: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    for x in out:
        if not SPEC_RE.match(x) or x == "ngram0":
            sys.exit(f"error: speculation {x!r}: use none, draft, ngramK (ngram-mod with n-max K, e.g. ngram16) "
                     "or ngram-simple.")
    return out or ["none"]


def server_cmd(args, cfg: ServerConfig, port: int) -> list[str]:
    """llama-server's command line: the per-prompt mode's settings, with -c = slots * per-slot context
    (llama-server splits -c across its slots) and one spec setting."""
    t = str(args.threads)
    cmd = [
        args.server_bin, "-m", str(args.target), "--host", "127.0.0.1", "--port", str(port),
        "-np", str(cfg.n_slots), "-cb", "-c", str(cfg.n_slots * args.ctx),
        "-b", str(args.batch), "-ub", str(args.batch), "-t", t, "-tb", t,
        "-fa", args.flash_attn, "-ctk", args.cache_type_k, "-ctv", args.cache_type_v, "-ngl", str(args.gpu_layers),
        "--cache-prompt" if args.cache_prompt == "on" else "--no-cache-prompt",
        "--metrics", "--no-webui", "-fit", "off",
    ]
    if cfg.spec == "ngram-simple":  # llama.cpp's own defaults (size-n 12, size-m 48, min-hits 1)
        cmd += ["--spec-type", "ngram-simple"]
    elif cfg.spec.startswith("ngram"):
        cmd += ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", str(args.ngram_match),
                "--spec-ngram-mod-n-max", cfg.spec[5:], "--spec-ngram-mod-n-min", str(args.ngram_min)]
    elif cfg.spec == "draft":
        cmd += ["-md", str(args.draft), "--spec-type", "draft-simple",
                "--spec-draft-n-max", str(args.draft_max), "--spec-draft-n-min", str(args.draft_min),
                "--spec-draft-p-min", str(args.p_min), "-td", t, "-tbd", t,
                "-ctkd", args.cache_type_k, "-ctvd", args.cache_type_v, "-ngld", str(args.gpu_layers)]
    return cmd + shlex.split(args.server_args or "")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(url: str, payload: dict | None = None, timeout: float = 3600) -> tuple[int, dict | str]:
    """(status, JSON body or text) of a GET (no payload) or a JSON POST."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, body = r.status, r.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read().decode("utf-8", errors="replace")
    try:
        return status, json.loads(body)
    except json.JSONDecodeError:
        return status, body


def _proc_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used, from /proc; None off Linux."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class Server:
    """One llama-server process on a free local port, for one configuration and one round:
    started, waited for (/health ok: the model is loaded), warmed up, stopped."""

    def __init__(self, args, cfg: ServerConfig, log_path: Path):
        self.args, self.cfg, self.log_path = args, cfg, log_path
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = server_cmd(args, cfg, self.port)
        self.proc: subprocess.Popen | None = None
        self.props: dict = {}

    def __enter__(self) -> Server:
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.args.server_timeout
        while True:
            if self.proc.poll() is not None:
                self._fail(f"llama-server exited with {self.proc.returncode} while starting")
            try:
                status, body = _http(self.url + "/health", timeout=5)
                if status == 200 and isinstance(body, dict) and body.get("status") == "ok":
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                self._fail(f"llama-server was not ready after {self.args.server_timeout} s")
            time.sleep(0.25)
        status, props = _http(self.url + "/props", timeout=30)
        self.props = props if status == 200 and isinstance(props, dict) else {}
        # warm-up: one short request (pages in the weights, builds the graphs); not measured
        status, body = _http(self.url + "/completion", {"prompt": PROBE_PROMPT, "n_predict": 4, "temperature": 0,
                                                        "cache_prompt": False, "seed": self.args.seed}, timeout=600)
        if status != 200:
            self._fail(f"the warm-up request failed ({status}): {str(body)[:300]}")
        return self

    def n_ctx_slot(self) -> int | None:
        gen = self.props.get("default_generation_settings") or {}
        return gen.get("n_ctx") or self.props.get("n_ctx")

    def _fail(self, why: str) -> None:
        self.__exit__(None, None, None)
        tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-25:])
        sys.exit(f"error: {why}.\n{' '.join(self.cmd)}\n{tail}")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self._log.closed:
            self._log.close()


def _completion(url: str, payload: dict) -> dict:
    t_send = time.perf_counter()
    status, body = _http(url + "/completion", payload)
    t_recv = time.perf_counter()
    if status != 200 or not isinstance(body, dict):
        raise RuntimeError(f"/completion answered {status}: {str(body)[:300]}")
    return {"t_send": t_send, "t_recv": t_recv, "body": body}


def run_server_batch(args, server: Server, prompts: list[tuple[str, str]]) -> dict:
    """Every prompt to /completion at once (or --in-flight at a time); the server queues what its
    slots cannot take. Wall = first request sent to last response received."""
    base = {"n_predict": args.max_tokens, "temperature": 0, "cache_prompt": args.cache_prompt == "on",
            "seed": args.seed}
    workers = args.in_flight or len(prompts)
    busy0, cpu_srv0, cpu_own0 = _busy_seconds(), _proc_cpu(server.proc.pid), time.process_time()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_completion, server.url, {**base, "prompt": text}) for _, text in prompts]
        answers = [f.result() for f in futures]
    wall = max(a["t_recv"] for a in answers) - min(a["t_send"] for a in answers)
    cpu_srv1 = _proc_cpu(server.proc.pid)
    own = (time.process_time() - cpu_own0) + (cpu_srv1 - cpu_srv0 if cpu_srv0 is not None and cpu_srv1 else 0.0)
    per_prompt = []
    for (name, _), a in zip(prompts, answers):
        b, t = a["body"], a["body"].get("timings") or {}
        per_prompt.append({
            "prompt": name, "text": b.get("content", ""), "stop_type": b.get("stop_type"),
            "n_prompt": int(t.get("prompt_n", 0)) + int(t.get("cache_n", 0)), "cache_n": t.get("cache_n", 0),
            "prompt_n": t.get("prompt_n", 0), "prompt_ms": t.get("prompt_ms", 0.0),
            "predicted_n": t.get("predicted_n", b.get("tokens_predicted", 0)), "predicted_ms": t.get("predicted_ms", 0.0),
            "draft_n": t.get("draft_n", 0), "draft_n_accepted": t.get("draft_n_accepted", 0),
            "seconds": a["t_recv"] - a["t_send"],
        })
    n_gen = sum(p["predicted_n"] for p in per_prompt)
    return {
        "n_gen": n_gen, "wall": wall, "tps": n_gen / wall if wall > 0 else 0.0,
        "n_drafted": sum(p["draft_n"] for p in per_prompt), "n_accepted": sum(p["draft_n_accepted"] for p in per_prompt),
        "others": _others(busy0, own, wall), "n_ctx_slot": server.n_ctx_slot(), "per_prompt": per_prompt,
    }


def _subst(argv: list[str], values: dict[str, str]) -> list[str]:
    out = []
    for a in argv:
        for k, v in values.items():
            a = a.replace("{" + k + "}", v)
        out.append(a)
    return out


def _replace_after(argv: list[str], flags: tuple[str, ...], value: str) -> bool:
    """Put ``value`` after the last of ``flags`` in ``argv`` (or into its --flag=X form); False if absent."""
    for i in range(len(argv) - 1, -1, -1):
        a = argv[i]
        if a in flags and i + 1 < len(argv):
            argv[i + 1] = value
            return True
        for f in flags:
            if f.startswith("--") and a.startswith(f + "="):
                argv[i] = f"{f}={value}"
                return True
    return False


def _batch_seconds(objs: list[dict], stderr: str) -> float | None:
    """specdec's own batch time (model load excluded) when its output carries one: a
    ``batch_seconds`` field in a stdout JSON line, a stderr line (JSON or ``batch_seconds=X``), or
    the summary ``run --batch`` prints without -q (``N prompts in S s: ...``)."""
    for o in reversed(objs):
        if isinstance(o.get("batch_seconds"), (int, float)):
            return float(o["batch_seconds"])
    for line in reversed(stderr.splitlines()):
        m = re.search(r"batch_seconds\"?\s*[:=]\s*([\d.]+)", line) or re.search(r"prompts in ([\d.]+) s: ", line)
        if m:
            return float(m.group(1))
    return None


def _run_cmd(argv: list[str]) -> tuple[subprocess.CompletedProcess, float, float | None]:
    ru0, busy0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), _busy_seconds(), time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                          stdin=subprocess.DEVNULL)
    wall, ru1 = time.perf_counter() - w0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.splitlines()[-25:])
        sys.exit(f"error: the specdec command failed (exit {proc.returncode}):\n{shlex.join(argv)}\n{tail}")
    return proc, wall, _others(busy0, cpu, wall)


def run_specdec_cmd(args, argv: list[str], files: dict[str, Path], log_dir: Path, tag: str) -> dict:
    """The user's specdec command over the prompt set, timed from its start to its end, minus
    model load: its own ``batch_seconds`` when it reports one, else the wall time of the same
    command on a one-token prompt with -n 1 (load, warm-up, exit), measured right after it."""
    main = _subst(argv, {"prompts": str(files["prompts"]), "n": str(args.max_tokens)})
    proc, wall, others = _run_cmd(main)
    (log_dir / f"{tag}.stdout.jsonl").write_text(proc.stdout)
    (log_dir / f"{tag}.stderr.log").write_text(proc.stderr)
    objs = []
    for line in proc.stdout.splitlines():
        try:
            o = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(o, dict):
            objs.append(o)
    lines = [o for o in objs if "n_generated" in o]
    if not lines:
        sys.exit(f"error: the specdec command printed no JSON line with n_generated:\n{shlex.join(main)}")
    batch = _batch_seconds(objs, proc.stderr)
    load, how = None, "batch_seconds"
    if batch is None:
        probe = _subst(argv, {"prompts": str(files["probe"]), "n": "1"})
        if "{prompts}" not in " ".join(argv) and not _replace_after(probe, ("--batch",), str(files["probe"])):
            sys.exit("error: the specdec command reports no batch_seconds and has neither {prompts} nor --batch FILE, "
                     "so its model load cannot be measured apart.")
        if "{n}" not in " ".join(argv):
            _replace_after(probe, ("-n", "--max-tokens", "--n-predict"), "1")
        _, load, _ = _run_cmd(probe)
        batch, how = max(wall - load, 1e-9), "wall - load probe"
    n_gen = sum(int(o["n_generated"]) for o in lines)
    return {
        "n_gen": n_gen, "wall": batch, "wall_total": wall, "load": load, "timing": how,
        "tps": n_gen / batch, "n_lines": len(lines),
        "n_drafted": sum(int(o.get("n_drafted") or 0) for o in lines),
        "n_accepted": sum(int(o.get("n_accepted") or 0) for o in lines),
        "others": others,
        "per_prompt": [{"prompt": str(o.get("id", o.get("index", i))), "n_prompt": o.get("n_prompt"),
                        "n_generated": o.get("n_generated"), "text": o.get("text", "")} for i, o in enumerate(lines)],
    }


def _common_server_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--target")
    ap.add_argument("--draft", help="draft model for the 'draft' server setting (default: the pinned pair's)")
    ap.add_argument("--draft-max", type=int, default=3, help="the 'draft' setting's --spec-draft-n-max")
    ap.add_argument("--draft-min", type=int, default=0)
    ap.add_argument("--p-min", type=float, default=0.0)
    ap.add_argument("--ngram-match", type=int, default=8, help="ngram-mod's n-match (--spec-ngram-mod-n-match)")
    ap.add_argument("--ngram-min", type=int, default=1,
                    help="ngram-mod's n-min (llama.cpp's default 48 exceeds a small n-max and would never draft)")
    ap.add_argument("-n", "--max-tokens", type=int, default=128, help="n_predict per request")
    ap.add_argument("--prompts-file", help="JSONL with prompt or messages, JSON strings or plain lines")
    ap.add_argument("--ctx", type=int, default=2048, help="context per slot (the server gets slots * this)")
    ap.add_argument("--batch", type=int, default=512, help="n_batch = n_ubatch")
    ap.add_argument("--threads", type=int, default=default_threads(), help="default: physical cores")
    ap.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--cache-type-k", default="f16")
    ap.add_argument("--cache-type-v", default="f16")
    ap.add_argument("-ngl", "--gpu-layers", type=int, default=0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--cache-prompt", choices=["on", "off"], default="on",
                    help="the server's prompt cache (--cache-prompt/--no-cache-prompt and each request's cache_prompt)")
    ap.add_argument("--server-bin", help="llama-server (default: $SPECDEC_NATIVE_SERVER, else build_native.sh)")
    ap.add_argument("--server-args", help="extra llama-server arguments, appended last (one shell-quoted string)")
    ap.add_argument("--server-timeout", type=float, default=600, help="seconds to wait for /health")
    ap.add_argument("--logs", help="keep the server logs and the specdec outputs in this folder")
    ap.add_argument("--json", help="write every figure to this file")


def _resolve_models(args, need_draft: bool) -> None:
    demo_models(args, draft=need_draft)
    args.server_bin = find_native(args.server_bin, "llama-server")


def _log_dir(args) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    if args.logs:
        Path(args.logs).mkdir(parents=True, exist_ok=True)
        return Path(args.logs), None
    tmp = tempfile.TemporaryDirectory(prefix="specdec-native-")
    return Path(tmp.name), tmp


def _med(xs) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def server_main(argv: list[str]) -> int:
    ap = Parser(
        prog="native_compare.py server",
        description="batch throughput: llama-server (slots, continuous batching) against a specdec command")
    _common_server_args(ap)
    ap.add_argument("--np", default="1,4,8", help="server slot counts to measure (comma-separated)")
    ap.add_argument("--spec", default="none",
                    help="server speculation settings, comma-separated: none, ngramK (ngram-mod, n-max K), draft")
    ap.add_argument("--in-flight", type=int, default=0, help="requests in flight at once (default 0: all)")
    ap.add_argument("--specdec-cmd", action="append", default=[],
                    help="a specdec command printing one JSON line per prompt; {prompts} and {n} are filled in. "
                         "Repeatable; 'LABEL::COMMAND' names it")
    ap.add_argument("--rounds", type=int, default=1, help="passes over all systems; the order flips every round")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        sys.exit("error: --rounds must be at least 1.")
    specs = _spec_list(args.spec)
    _resolve_models(args, "draft" in specs)
    log_dir, tmp = _log_dir(args)
    prompts = load_prompts(args.prompts_file, args.target)
    files = {"prompts": log_dir / "prompts.jsonl", "probe": log_dir / "probe.jsonl"}
    files["prompts"].write_text("".join(json.dumps({"id": n, "prompt": t}) + "\n" for n, t in prompts))
    files["probe"].write_text(json.dumps({"id": "probe", "prompt": PROBE_PROMPT}) + "\n")

    systems: list[tuple[str, object]] = [
        (ServerConfig(n, sp).label, ServerConfig(n, sp)) for n in _int_list(args.np) for sp in specs]
    for i, c in enumerate(args.specdec_cmd):
        label, _, cmd = c.rpartition("::") if "::" in c else ("", "", c)
        label = label or ("specdec" if len(args.specdec_cmd) == 1 else f"specdec#{i + 1}")
        systems.append((label, shlex.split(cmd)))
    if len({label for label, _ in systems}) != len(systems):
        sys.exit("error: two systems have the same label.")

    print(f"target {Path(args.target).name}" + (f", draft {Path(args.draft).name}" if args.draft else ""))
    print(f"server {args.server_bin}")
    print(f"{len(prompts)} prompts, greedy, raw /completion, -n {args.max_tokens}, threads {args.threads}, "
          f"ctx {args.ctx}/slot, batch {args.batch}, fa {args.flash_attn}, kv {args.cache_type_k}/{args.cache_type_v}, "
          f"ngl {args.gpu_layers}, cache_prompt {args.cache_prompt}, ngram-mod n-match {args.ngram_match} "
          f"n-min {args.ngram_min}, draft-max {args.draft_max}, rounds {args.rounds}")
    hdr = f"{'round':>5}  {'system':<24} {'gen':>6} {'wall s':>8} {'tok/s':>8} {'drafted/acc':>16} {'others':>6}  note"
    print_header(hdr)

    records: dict[str, list[dict]] = {label: [] for label, _ in systems}
    load0, t0 = _load(), time.perf_counter()
    for r in range(args.rounds):
        for label, what in (systems if r % 2 == 0 else systems[::-1]):
            tag = re.sub(r"[^\w.=#-]+", "_", label) + f".r{r}"
            if isinstance(what, ServerConfig):
                with Server(args, what, log_dir / f"{tag}.log") as server:
                    rec = run_server_batch(args, server, prompts)
                rec["cmd"] = shlex.join(server.cmd)
                note = f"n_ctx/slot {rec['n_ctx_slot']}"
            else:
                rec = run_specdec_cmd(args, what, files, log_dir, tag)
                rec["cmd"] = shlex.join(what)
                note = (f"{rec['timing']}" + (f" (total {rec['wall_total']:.1f} s, load {rec['load']:.1f} s)"
                                              if rec["load"] is not None else ""))
                if rec["n_lines"] != len(prompts):
                    note += f"; {rec['n_lines']} lines for {len(prompts)} prompts!"
            rec["round"] = r
            records[label].append(rec)
            acc = f"{rec['n_drafted']}/{rec['n_accepted']}" if rec["n_drafted"] else "-"
            oth = "?" if rec["others"] is None else f"{rec['others']:.1f}" + ("!" if rec["others"] > DISTURBED else "")
            print(f"{r:>5}  {label:<24} {rec['n_gen']:>6} {rec['wall']:>8.2f} {rec['tps']:>8.2f} {acc:>16} {oth:>6}  "
                  f"{note}")
            sys.stdout.flush()

    # summary: medians over rounds
    print()
    hdr2 = f"{'system':<24} {'gen':>6} {'wall s':>8} {'tok/s':>8} {'min-max tok/s':>15} {'vs first':>8} {'acc rate':>8}"
    print(hdr2)
    print("-" * len(hdr2))
    first_tps = None
    summary = {}
    for label, _ in systems:
        recs = records[label]
        tps = [x["tps"] for x in recs]
        med_tps = _med(tps)
        first_tps = first_tps or med_tps
        d, a = recs[-1]["n_drafted"], recs[-1]["n_accepted"]
        summary[label] = {"n_gen": _med(x["n_gen"] for x in recs), "wall": _med(x["wall"] for x in recs),
                          "tps": med_tps, "tps_min": min(tps), "tps_max": max(tps), "n_drafted": d, "n_accepted": a}
        print(f"{label:<24} {summary[label]['n_gen']:>6.0f} {summary[label]['wall']:>8.2f} {med_tps:>8.2f} "
              f"{min(tps):>7.2f}-{max(tps):<7.2f} {med_tps / first_tps:>8.2f} "
              f"{(f'{100 * a / d:.0f}%' if d else '-'):>8}")
    print("-" * len(hdr2))
    print(f"{args.rounds} round(s), {time.perf_counter() - t0:.0f} s; 1-min load average {load0} at the start, "
          f"{_load()} at the end, on {os.cpu_count()} CPUs. tok/s = generated tokens / wall seconds of the batch "
          f"(server: first request sent to last answer; specdec: process time minus model load).")
    _check_prompt_counts(records, systems)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                               "prompts": [n for n, _ in prompts], "summary": summary,
                                               "runs": records}, indent=1))
    if tmp is not None:
        tmp.cleanup()
    return 0


def _check_prompt_counts(records: dict[str, list[dict]], systems) -> None:
    """Warn where a specdec line's n_prompt differs from the server's prompt tokens (cache_n + prompt_n)."""
    server = next((records[label][0] for label, w in systems if isinstance(w, ServerConfig)), None)
    if server is None:
        return
    ref = {p["prompt"]: p for p in server["per_prompt"]}
    for label, w in systems:
        if isinstance(w, ServerConfig):
            continue
        rec = records[label][0]
        bad = [p["prompt"] for p in rec["per_prompt"]
               if p["prompt"] in ref and p["n_prompt"] is not None and p["n_prompt"] != ref[p["prompt"]]["n_prompt"]]
        same = sum(1 for p in rec["per_prompt"] if p["prompt"] in ref
                   and same_text(p["text"], ref[p["prompt"]]["text"]) == "same")
        print(f"{label}: {same}/{len(rec['per_prompt'])} outputs agree with the server's on their common length"
              + (f"; prompt token counts differ for {', '.join(bad)}" if bad else "; prompt token counts agree"))


# --- session mode: multi-turn conversations against llama-server ---------------------------------


def _stream_chat(url: str, payload: dict) -> dict:
    """One streamed /v1/chat/completions turn: its text, time to first token, total time, timings."""
    data = json.dumps({**payload, "stream": True}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=data, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft, parts, timings, usage = None, [], {}, {}
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode("utf-8", errors="replace").strip()
            if not line.startswith("data:"):
                continue
            body = line[5:].strip()
            if body == "[DONE]":
                break
            chunk = json.loads(body)
            for ch in chunk.get("choices") or []:
                piece = (ch.get("delta") or {}).get("content")
                if piece:
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    parts.append(piece)
            timings = chunk.get("timings") or timings
            usage = chunk.get("usage") or usage
    total = time.perf_counter() - t0
    return {"text": "".join(parts), "ttft": ttft, "total": total, "timings": timings,
            "n_gen": timings.get("predicted_n", usage.get("completion_tokens", 0))}


def session_main(argv: list[str]) -> int:
    ap = Parser(
        prog="native_compare.py session",
        description="agent-loop shape: K concurrent multi-turn chats, each turn resending the whole conversation")
    _common_server_args(ap)
    ap.add_argument("--sessions", type=int, default=4, help="concurrent conversations (K)")
    ap.add_argument("--turns", type=int, default=3, help="user turns per conversation")
    ap.add_argument("--np", type=int, default=0, help="server slots (default: --sessions)")
    ap.add_argument("--spec", default="none", help="one server speculation setting: none, ngramK or draft")
    args = ap.parse_args(argv)
    spec = _spec_list(args.spec)
    if len(spec) != 1:
        sys.exit("error: session mode takes one --spec setting.")
    _resolve_models(args, spec[0] == "draft")
    log_dir, tmp = _log_dir(args)
    cfg = ServerConfig(args.np or args.sessions, spec[0])
    firsts = _first_messages(args.prompts_file)

    def conversation(k: int, url: str) -> list[dict]:
        msgs = list(firsts[k % len(firsts)])
        turns = []
        for t in range(args.turns):
            if t > 0:
                msgs.append({"role": "user", "content": FOLLOW_UPS[(t - 1) % len(FOLLOW_UPS)]})
            res = _stream_chat(url, {"messages": msgs, "max_tokens": args.max_tokens, "temperature": 0,
                                     "cache_prompt": args.cache_prompt == "on", "seed": args.seed})
            msgs.append({"role": "assistant", "content": res["text"]})
            tm = res["timings"]
            turns.append({"session": k, "turn": t, "ttft": res["ttft"], "total": res["total"], "n_gen": res["n_gen"],
                          "prompt_n": tm.get("prompt_n"), "cache_n": tm.get("cache_n"),
                          "draft_n": tm.get("draft_n", 0), "draft_n_accepted": tm.get("draft_n_accepted", 0)})
        return turns

    print(f"target {Path(args.target).name}; {cfg.label}; {args.sessions} sessions x {args.turns} turns, "
          f"-n {args.max_tokens}, cache_prompt {args.cache_prompt}, threads {args.threads}, ctx {args.ctx}/slot")
    with Server(args, cfg, log_dir / "session-server.log") as server:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.sessions) as pool:
            results = [x for f in [pool.submit(conversation, k, server.url) for k in range(args.sessions)]
                       for x in f.result()]
        wall = time.perf_counter() - t0
    hdr = f"{'turn':>4} {'ttft med s':>10} {'ttft max s':>10} {'total med s':>11} {'gen':>6} {'prompt_n':>8} {'cache_n':>8}"
    print_header(hdr)
    for t in range(args.turns):
        rows = [x for x in results if x["turn"] == t]
        ttfts = [x["ttft"] for x in rows if x["ttft"] is not None]
        print(f"{t:>4} {_med(ttfts):>10.3f} {max(ttfts, default=float('nan')):>10.3f} "
              f"{_med(x['total'] for x in rows):>11.3f} {sum(x['n_gen'] for x in rows):>6} "
              f"{_med(x['prompt_n'] for x in rows):>8.0f} {_med(x['cache_n'] for x in rows):>8.0f}")
    n_gen = sum(x["n_gen"] for x in results)
    print("-" * len(hdr))
    print(f"{n_gen} tokens in {wall:.2f} s: {n_gen / wall:.2f} tok/s over all sessions "
          f"(prompt_n/cache_n: medians of prompt tokens computed / reused from the slot's cache)")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "wall": wall,
                                               "turns": results, "cmd": shlex.join(server.cmd)}, indent=1))
    if tmp is not None:
        tmp.cleanup()
    return 0


def _first_messages(path: str | None) -> list[list[dict]]:
    """Each session's opening messages: a prompts file's "messages" lines as they are, and its
    "prompt" or plain lines as one user message; the built-in prompts without a file."""
    if not path:
        return [[{"role": "user", "content": text}] for _, text in DEFAULT_PROMPTS]
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = line
        if isinstance(obj, dict) and isinstance(obj.get("messages"), list):
            out.append(obj["messages"])
        elif isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
            out.append([{"role": "user", "content": obj["prompt"]}])
        else:
            out.append([{"role": "user", "content": obj if isinstance(obj, str) else line}])
    if not out:
        sys.exit(f"error: {path} holds no prompts.")
    return out


# --- slot mode: one at a time, specdec's target alone against llama-server's single slot --------


def slot_main(argv: list[str]) -> int:
    ap = Parser(
        prog="native_compare.py slot",
        description="one at a time: specdec's target alone against llama-server's single slot, interleaved per prompt")
    _common_server_args(ap)
    ap.add_argument("--rounds", type=int, default=2, help="passes over the prompts; the order flips every round")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        sys.exit("error: --rounds must be at least 1.")
    args.cache_prompt = "off"  # every request reads its whole prompt, as specdec's one-at-a-time path does
    _resolve_models(args, False)
    from specdec_cli.engine.decode.runner import Engine, GenOptions

    log_dir, tmp = _log_dir(args)
    prompts = load_prompts(args.prompts_file, args.target)
    engine = Engine(args.target, None, options=engine_options(args))
    encoded = warmed_up(engine, prompts)  # as the server is
    base = {"n_predict": args.max_tokens, "temperature": 0, "cache_prompt": False, "seed": args.seed}

    def server_side(url: str, text: str) -> dict:
        a = _completion(url, {**base, "prompt": text})
        t = a["body"].get("timings") or {}
        return {"prompt_s": t.get("prompt_ms", 0.0) / 1000, "decode_s": t.get("predicted_ms", 0.0) / 1000,
                "whole_s": a["t_recv"] - a["t_send"], "n_gen": int(t.get("predicted_n", 0)),
                "n_prompt": int(t.get("prompt_n", 0)), "text": a["body"].get("content", "")}

    def specdec_side(tokens: list[int]) -> dict:
        w0 = time.perf_counter()
        r = engine.generate(tokens, GenOptions(max_tokens=args.max_tokens))
        s = r.stats
        return {"prompt_s": s.prompt_seconds, "decode_s": s.decode_seconds, "whole_s": time.perf_counter() - w0,
                "n_gen": s.n_generated, "n_prompt": s.n_prompt, "text": r.text}

    print(f"target {Path(args.target).name}; llama-server 1 slot, no speculation, cache_prompt off; "
          f"{len(prompts)} prompts x {args.rounds} rounds, greedy, -n {args.max_tokens}, threads {args.threads}, "
          f"ctx {args.ctx}, batch {args.batch}, fa {args.flash_attn}, kv {args.cache_type_k}/{args.cache_type_v}")
    hdr = (f"{'round':>5} {'prompt':<14} {'tok':>5} {'gen':>4}  {'server p/d s':>13}  {'specdec p/d s':>13}  "
           f"{'whole ratio':>11}  output")
    print_header(hdr)
    rows = []
    with Server(args, ServerConfig(1, "none"), log_dir / "slot-server.log") as server:
        for r in range(args.rounds):
            for i, ((name, text), tokens) in enumerate(zip(prompts, encoded)):
                server_first = (i + r) % 2 == 0
                if server_first:
                    srv, spd = server_side(server.url, text), specdec_side(tokens)
                else:
                    spd, srv = specdec_side(tokens), server_side(server.url, text)
                if srv["n_prompt"] != spd["n_prompt"]:
                    print(f"warning: {name}: the server read {srv['n_prompt']} prompt tokens, specdec "
                          f"{spd['n_prompt']}", file=sys.stderr)
                # per token, since the server may emit a token or two more or fewer (end of generation)
                ratio = (srv["whole_s"] / max(srv["n_gen"], 1)) / (spd["whole_s"] / max(spd["n_gen"], 1))
                rows.append({"round": r, "prompt": name, "server": srv, "specdec": spd, "ratio": ratio})
                print(f"{r:>5} {name:<14} {spd['n_prompt']:>5} {spd['n_gen']:>4}  "
                      f"{srv['prompt_s']:>6.2f}/{srv['decode_s']:<6.2f}  {spd['prompt_s']:>6.2f}/{spd['decode_s']:<6.2f}  "
                      f"{ratio:>11.3f}  {same_text(srv['text'], spd['text'])}")
                sys.stdout.flush()
    engine.close()

    def total(side: str, key: str) -> float:
        return sum(x[side][key] for x in rows)

    gen = {side: total(side, "n_gen") for side in ("server", "specdec")}
    print("-" * len(hdr))
    print("specdec speed / server speed (summed over all prompts and rounds; > 1: specdec faster):")
    print(f"  prompt reading  {total('server', 'prompt_s') / total('specdec', 'prompt_s'):.3f}")
    print(f"  decoding        {(gen['specdec'] / total('specdec', 'decode_s')) / (gen['server'] / total('server', 'decode_s')):.3f}"
          f"  ({gen['specdec'] / total('specdec', 'decode_s'):.2f} against {gen['server'] / total('server', 'decode_s'):.2f} tok/s)")
    print(f"  whole requests  {(gen['specdec'] / total('specdec', 'whole_s')) / (gen['server'] / total('server', 'whole_s')):.3f}"
          f"  (generated tokens per second of request; median per prompt {statistics.median(x['ratio'] for x in rows):.3f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows,
                                               "cmd": shlex.join(server.cmd)}, indent=1))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    modes = {"server": server_main, "session": session_main, "slot": slot_main}
    if len(sys.argv) > 1 and sys.argv[1] in modes:
        sys.exit(modes[sys.argv[1]](sys.argv[2:]))
    sys.exit(main())
