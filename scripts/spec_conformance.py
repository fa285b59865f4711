"""Step-for-step conformance of specdec's EAGLE-3, DFlash and DSpark drafters with llama.cpp.

For each method, the same synthetic pair (the test suite's fixtures: random f32 weights, a
llama target for EAGLE-3 and a qwen3 target for DFlash/DSpark, heads laid out as llama.cpp
loads them), the same prompt and the same settings go through llama.cpp's own
`llama-speculative-simple --spec-type draft-eagle3|draft-dflash|draft-dspark` and through
specdec's Engine. llama.cpp logs, at debug level, "accepted A/D draft tokens" for every
target pass; specdec records the same (drafted, accepted) pair per pass. The two sequences
must be equal.

    scripts/build_native.sh               # once: builds llama-speculative-simple into ~/.cache
    python scripts/spec_conformance.py    # prints one line per case, exits 1 on any mismatch

Not run in CI (it needs the native build, about 15 minutes on 2 cores). Both sides run with
flash attention off and an f32 KV cache, where llama.cpp's batched and single-token logits
agree to ~5e-4 on these fixtures (../shared/notes/batch-numerics.md), so an argmax cannot flip.

What is compared: every pass both sides make before llama.cpp's draft budget kicks in.
speculative-simple caps a draft at "-n minus what it has generated, minus 1" and, when that
reaches 0, stops capping at all, so it runs a few tokens past -n; specdec generates -n plus a
margin here so that it is never the one capped while the passes are compared.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

from native_compare import find_native  # noqa: E402
from tiny_models import HEAD_PROMPTS, TARGET_SHAPE, write_dflash_gguf, write_eagle3_gguf, write_llama_gguf  # noqa: E402

PROMPTS = HEAD_PROMPTS[:6]

from specdec_cli.engine.runner import DraftOptions, Engine, EngineOptions, GenOptions  # noqa: E402

RE_STEP = re.compile(r"accepted (\d+)/(\d+) draft tokens")
THREADS = 2
CTX = 512


@dataclass
class Case:
    method: str
    target: Path
    draft: Path
    draft_max: int
    p_min: float


def fixtures(d: Path) -> dict[str, tuple[Path, Path]]:
    """(target, head) per method, written with the test suite's generators."""
    d.mkdir(parents=True, exist_ok=True)
    llama = write_llama_gguf(d / "target-llama.gguf", **TARGET_SHAPE, seed=1, focus=4, name="tiny-target")
    qwen3 = write_llama_gguf(d / "target-qwen3.gguf", **TARGET_SHAPE, seed=5, focus=4, arch="qwen3",
                             name="tiny-qwen3", basename="Tiny-Qwen3")
    return {
        "eagle3": (llama, write_eagle3_gguf(d / "eagle3.gguf")),
        "dflash": (qwen3, write_dflash_gguf(d / "dflash.gguf")),
        "dspark": (qwen3, write_dflash_gguf(d / "dspark.gguf", markov_rank=16, name="tiny-dspark")),
    }


def native_steps(binary: str, case: Case, prompt: str, n: int) -> list[tuple[int, int]]:
    cmd = [
        binary, "-m", str(case.target), "-md", str(case.draft), "-p", prompt, "--no-escape",
        "-n", str(n), "--temp", "0", "-s", "1",
        "--spec-type", f"draft-{case.method}",
        "--spec-draft-n-max", str(case.draft_max), "--spec-draft-n-min", "0",
        "--spec-draft-p-min", str(case.p_min),
        "-t", str(THREADS), "-tb", str(THREADS), "-td", str(THREADS), "-tbd", str(THREADS),
        "-c", str(CTX), "-b", "512", "-ub", "512", "-fa", "off",
        "-ctk", "f32", "-ctv", "f32", "-ctkd", "f32", "-ctvd", "f32",
        "-fit", "off", "-lv", "5",  # "accepted A/D draft tokens" is a debug line
    ]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-15:])
        sys.exit(f"error: llama-speculative-simple failed (exit {proc.returncode}):\n{tail}")
    return [(int(d), int(a)) for a, d in RE_STEP.findall(proc.stdout)]


def comparable(steps: list[tuple[int, int]], n: int, draft_max: int) -> int:
    """How many of llama.cpp's passes come before its budget cap can shorten a draft."""
    done = 0
    for i, (_, acc) in enumerate(steps):
        if n - done - 1 < draft_max:
            return i
        done += acc + 1
    return len(steps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--max-tokens", type=int, default=64)
    ap.add_argument("--native-bin", help="llama-speculative-simple (default: $SPECDEC_NATIVE_BIN, else build_native.sh)")
    ap.add_argument("--fixtures", help="folder for the synthetic GGUFs (default: a temporary one)")
    args = ap.parse_args()
    binary = find_native(args.native_bin)
    fdir = Path(args.fixtures) if args.fixtures else Path(tempfile.mkdtemp(prefix="specdec-conformance-"))
    pairs = fixtures(fdir)
    settings = {
        "eagle3": [(4, 0.0), (6, 0.0), (4, 0.3)],
        "dflash": [(4, 0.0), (6, 0.0), (3, 0.3)],
        "dspark": [(4, 0.0), (7, 0.0), (4, 0.5)],
    }
    n = args.max_tokens
    print(f"native {binary}")
    print(f"fixtures {fdir}; greedy, raw prompts, -n {n}, threads {THREADS}, ctx {CTX}, fa off, f32 KV")
    hdr = f"{'method':<7} {'dmax':>4} {'p-min':>5}  {'prompt':<26} {'passes':>6}  {'native dr/acc':>13}  {'specdec dr/acc':>14}  result"
    print(hdr)
    print("-" * len(hdr))
    bad = 0
    total = {"passes": 0, "nd": 0, "na": 0}
    for method, (target, head) in pairs.items():
        for draft_max, p_min in settings[method]:
            case = Case(method, target, head, draft_max, p_min)
            engine = Engine(
                target, head, method=method,
                options=EngineOptions(n_ctx=CTX, n_batch=512, threads=THREADS, flash_attn="off",
                                      cache_type_k="f32", cache_type_v="f32"),
                draft=DraftOptions(draft_max=draft_max, draft_min=0, p_min=p_min),
            )
            for prompt in PROMPTS:
                nat = native_steps(binary, case, prompt, n)
                k = comparable(nat, n, draft_max)
                res = engine.generate(engine.tokenize_prompt(prompt), GenOptions(max_tokens=n + 2 * (draft_max + 1)))
                ours = res.stats.steps
                if res.stats.stop_reason == "eog":  # llama.cpp's sampler bans end-of-generation here
                    k = min(k, len(ours))
                a, b = nat[:k], ours[:k]
                nd, na = sum(d for d, _ in a), sum(x for _, x in a)
                sd, sa = sum(d for d, _ in b), sum(x for _, x in b)
                if a == b:
                    result = "same"
                else:
                    bad += 1
                    i = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
                    result = f"DIFFER at pass {i}: native {a[i] if i < len(a) else '-'} specdec {b[i] if i < len(b) else '-'}"
                total["passes"] += k
                total["nd"] += nd
                total["na"] += na
                print(f"{method:<7} {draft_max:>4} {p_min:>5}  {prompt[:26]:<26} {k:>6}  {nd:>6}/{na:<6}  {sd:>7}/{sa:<6}  {result}")
                sys.stdout.flush()
            engine.close()
    print("-" * len(hdr))
    print(f"{total['passes']} passes compared, {total['nd']} drafted / {total['na']} accepted by llama.cpp; "
          f"{'all identical' if not bad else f'{bad} case(s) differ'}")
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    sys.exit(main())
