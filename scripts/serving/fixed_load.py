"""The engine's own time over HTTP: fixed-length answers, 1, 2, 4 and 16 clients at once.

    python3 scripts/serving/fixed_load.py --clients 1,2,4,16 --rounds 2 \\
        --system "llama::llama-server -m T -np {parallel} -c {ctx} -t 2 --port {port}" \\
        --system "specdec::python3 -m specdec_cli serve -t T --no-draft --parallel {parallel} --port {port}"

With nothing drafted, a server's speed is the model's passes plus its own time between them;
this compares that own time. For each client count K, every system is started with
``{parallel}`` = K (and ``{ctx}`` = K x 4,096, llama-server's context being shared by its
slots), warmed up, and sent ``--requests`` x K streamed chat completions, K at a time, each
asking for a long essay on a different subject with ``-n`` tokens at most, greedy: so every
answer runs to the budget and both sides decode the same number of tokens (the table says
how many answers ended early, and the tokens each side generated). Throughput is generated
tokens per second of the whole load; rounds alternate the systems' order. The servers' output
goes to ``--log``.

Each run also gives the server's host CPU a token (Linux): the CPU time of its threads other
than llama.cpp's compute threads, told apart as the threads busy for more than half the load's
wall time (they spin between passes). On a machine whose cores llama.cpp's threads all take,
that host time (the HTTP side, the server's own code between passes, its sampling) is paid out
of the passes' time.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared.machine import thread_cpu  # noqa: E402
from _shared.script_io import Parser, one_line_errors, write_json  # noqa: E402
from _shared.systems import Server, alternating, stream_turn, systems_of  # noqa: E402

SUBJECTS = ["lighthouses", "the history of paper", "bees", "glaciers", "the printing press", "volcanoes",
            "the Silk Road", "tides", "bridges", "clocks", "salt", "coral reefs", "railways", "ink", "the compass",
            "bread", "windmills", "owls", "copper", "maps", "rivers", "telescopes", "wool", "deserts", "canals",
            "tea", "bicycles", "lichens", "harbours", "bells", "the abacus", "forests", "kites", "glass",
            "the telegraph", "honey", "caves", "sails", "paper money", "mountains"]


def prompt(i: int) -> list[dict]:
    return [{"role": "user", "content": f"Write a long, detailed essay of at least 2,000 words about "
                                        f"{SUBJECTS[i % len(SUBJECTS)]}. Do not stop early."}]


def host_cpu(before: dict[int, float] | None, after: dict[int, float] | None, wall: float) -> dict:
    """The server's threads over one load: how many were busy more than half its wall time (llama.cpp's
    compute threads, which spin between passes) and the CPU seconds the others used (the host's)."""
    if before is None or after is None:
        return {}
    used = [cpu - before.get(tid, 0.0) for tid, cpu in after.items()]
    compute = [u for u in used if u > wall / 2]
    return {"compute_threads": len(compute), "host_cpu": sum(used) - sum(compute)}


def load(url: str, clients: int, per_client: int, n: int) -> dict:
    """``clients`` threads, each sending ``per_client`` requests back to back; every answer's figures."""
    answers: list[dict] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        for j in range(per_client):
            got = stream_turn(url, prompt(k * per_client + j), n)
            with lock:
                answers.append(got)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    n_gen = sum(a["n_gen"] for a in answers)
    return {"wall": wall, "n_gen": n_gen, "tok_s": n_gen / wall, "short": sum(a["n_gen"] < n for a in answers),
            "ttft_p50": statistics.median(a["ttft"] for a in answers if a["ttft"] is not None)}


def main() -> int:
    ap = Parser(description="The engine's own time over HTTP: fixed-length answers at 1, 2, 4 and 16 clients.")
    ap.add_argument("--system", action="append", required=True,
                    help="LABEL::command line with {port}, {parallel} (the client count) and {ctx}")
    ap.add_argument("--clients", default="1,2,4,16", help="client counts, comma-separated")
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("-n", "--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--log", default="fixed_load.log", help="the servers' output")
    args = ap.parse_args()
    systems = systems_of(ap, args.system)
    try:
        counts = [int(c) for c in args.clients.split(",")]
    except ValueError:
        ap.error(f"--clients {args.clients!r} is not a comma-separated list of numbers")
    if any(c < 1 for c in counts):
        ap.error("--clients: every count must be at least 1")
    runs: list[dict] = []
    with open(args.log, "a") as log:
        for k in counts:
            for r, label, cmd in alternating(systems, args.rounds):
                server = Server(label, cmd.replace("{parallel}", str(k)).replace("{ctx}", str(4096 * k)), log)
                try:
                    stream_turn(server.url, [{"role": "user", "content": "Hello"}], 2)  # warm-up
                    before = thread_cpu(server.proc.pid)
                    out = load(server.url, k, args.requests, args.max_tokens)
                    out |= host_cpu(before, thread_cpu(server.proc.pid), out["wall"])
                finally:
                    server.stop()
                runs.append({"clients": k, "round": r, "label": label, **out})
                host = (f"  host cpu {out['host_cpu'] * 1e3 / max(1, out['n_gen']):5.2f} ms/tok"
                        f" ({out['compute_threads']} compute threads)") if "host_cpu" in out else ""
                print(f"{k:>2} clients  round {r}  {label:<12} {out['wall']:7.2f} s  {out['n_gen']:5d} tok  "
                      f"{out['tok_s']:7.2f} tok/s  ttft p50 {out['ttft_p50']:5.2f} s  short {out['short']}{host}",
                      flush=True)
    print(f"\n{'clients':>7}  " + "  ".join(f"{label + ' tok/s':>18}" for label, _ in systems)
          + (f"  {'ratio':>6}" if len(systems) == 2 else ""))
    for k in counts:
        rates = [statistics.mean(x["tok_s"] for x in runs if x["clients"] == k and x["label"] == label)
                 for label, _ in systems]
        ratio = f"  {rates[1] / rates[0]:6.3f}" if len(rates) == 2 else ""
        print(f"{k:>7}  " + "  ".join(f"{v:18.2f}" for v in rates) + ratio)
    if args.json:
        return write_json(args.json, {"args": vars(args), "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(one_line_errors(main))
