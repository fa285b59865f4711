"""Step-for-step conformance of specdec's drafters with llama.cpp's, on every kind of memory.

For each case, the same synthetic pair (the test suite's fixtures: random f32 weights laid out
as llama.cpp loads them), the same prompt and the same settings go through llama.cpp's own
`llama-speculative-simple --spec-type ...` and through specdec's Engine:

- EAGLE-3 (a llama target), DFlash and DSpark (a qwen3 target): `draft-eagle3|dflash|dspark`;
- a classic draft model on a recurrent target (Mamba 2, checkpointed), a hybrid one (Qwen3.5:
  llama.cpp gives a draft-simple target no snapshots, so it is checkpointed there, and specdec
  is run the same way) and a sliding-window one (Gemma 3): `draft-simple`;
- the target's MTP layers (Qwen3.5 with one nextn block; the target keeps recurrent-state
  snapshots, as llama.cpp gives it; and Step 3.5 with two blocks, chained heads): `draft-mtp`,
  no draft file.

llama.cpp logs, at debug level, "accepted A/D draft tokens" for every pass it keeps and
"partial acceptance: A < D, restoring checkpoint" for a pass it undoes; specdec records
(drafted, accepted) per pass and which passes restored a checkpoint. After a restore llama.cpp
makes the kept tokens and the target's own one the next pass's draft, all accepted; specdec
re-evaluates them in its next pass without a draft, which it records as (0, 0): that pass is
compared as llama.cpp logs it, (A+1)/(A+1). The two sequences must be equal.

    scripts/build_native.sh               # once: builds llama-speculative-simple into ~/.cache
    python scripts/checks/spec_conformance.py    # prints one line per case, exits 1 on any mismatch

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared

from _shared import TESTS  # noqa: E402
from _shared.llama_server import find_native  # noqa: E402
from _shared.script_io import Parser  # noqa: E402

sys.path.insert(0, str(TESTS))  # the test suite's GGUF writers

from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions  # noqa: E402
from tiny_memory_models import (  # noqa: E402
    GEMMA3_EMBD,
    MAMBA2_EMBD,
    MEMORY_PROMPTS,
    QWEN35_EMBD,
    write_gemma3_gguf,
    write_mamba2_gguf,
    write_qwen35_gguf,
    write_step35_gguf,
)
from tiny_models import HEAD_PROMPTS, TARGET_SHAPE, write_dflash_gguf, write_eagle3_gguf, write_llama_gguf  # noqa: E402

PROMPTS = HEAD_PROMPTS[:6]

RE_STEP = re.compile(r"partial acceptance: (\d+) < (\d+)|accepted (\d+)/(\d+) draft tokens")
THREADS = 2
CTX = 512


@dataclass
class Case:
    label: str  # what the table calls it
    method: str  # specdec's method: eagle3, dflash, dspark, draft, mtp
    target: Path
    draft: Path | None  # None: MTP, the target's own layers
    draft_max: int
    p_min: float
    snapshots: bool = True  # llama.cpp's draft-simple gives the target none: checkpoints

    @property
    def spec_type(self) -> str:
        return "draft-simple" if self.method == "draft" else f"draft-{self.method}"


# label -> (method, snapshots, settings as (draft_max, p_min))
SETTINGS = {
    "eagle3": ("eagle3", True, [(4, 0.0), (6, 0.0), (4, 0.3)]),
    "dflash": ("dflash", True, [(4, 0.0), (6, 0.0), (3, 0.3)]),
    "dspark": ("dspark", True, [(4, 0.0), (7, 0.0), (4, 0.5)]),
    "mamba2": ("draft", True, [(4, 0.0), (6, 0.0), (4, 0.3)]),
    "qwen35": ("draft", False, [(4, 0.0), (6, 0.0), (4, 0.3)]),
    "gemma3": ("draft", True, [(4, 0.0), (6, 0.0), (4, 0.3)]),
    "mtp": ("mtp", True, [(3, 0.0), (4, 0.0), (3, 0.3)]),
    "mtp2": ("mtp", True, [(2, 0.0), (4, 0.0), (2, 0.3)]),  # chained heads: drafts clamp to 2
}
MEMORY_CASES = ("mamba2", "qwen35", "gemma3", "mtp", "mtp2")  # their prompts are MEMORY_PROMPTS


def fixtures(d: Path) -> dict[str, tuple[Path, Path | None]]:
    """(target, draft) per label, written with the test suite's generators."""
    d.mkdir(parents=True, exist_ok=True)
    llama = write_llama_gguf(d / "target-llama.gguf", **TARGET_SHAPE, seed=1, focus=4, name="tiny-target")
    qwen3 = write_llama_gguf(d / "target-qwen3.gguf", **TARGET_SHAPE, seed=5, focus=4, arch="qwen3",
                             name="tiny-qwen3", basename="Tiny-Qwen3")
    return {
        "eagle3": (llama, write_eagle3_gguf(d / "eagle3.gguf")),
        "dflash": (qwen3, write_dflash_gguf(d / "dflash.gguf")),
        "dspark": (qwen3, write_dflash_gguf(d / "dspark.gguf", markov_rank=16, name="tiny-dspark")),
        "mamba2": (write_mamba2_gguf(d / "mamba2.gguf", n_layer=3, embd_scale=MAMBA2_EMBD),
                   write_mamba2_gguf(d / "mamba2-draft.gguf", n_layer=1, seed=31, embd_scale=MAMBA2_EMBD,
                                     name="tiny-mamba2-draft")),
        "qwen35": (write_qwen35_gguf(d / "qwen35.gguf", embd_scale=QWEN35_EMBD),
                   write_qwen35_gguf(d / "qwen35-draft.gguf", n_layer=2, seed=41, embd_scale=QWEN35_EMBD,
                                     name="tiny-qwen35-draft")),
        "gemma3": (write_gemma3_gguf(d / "gemma3.gguf", embd_scale=GEMMA3_EMBD),
                   write_gemma3_gguf(d / "gemma3-draft.gguf", n_layer=2, seed=51, embd_scale=GEMMA3_EMBD,
                                     name="tiny-gemma3-draft")),
        "mtp": (write_qwen35_gguf(d / "qwen35-mtp.gguf", nextn=1, embd_scale=QWEN35_EMBD, name="tiny-qwen35-mtp"),
                None),
        "mtp2": (write_step35_gguf(d / "step35-mtp.gguf", embd_scale=QWEN35_EMBD), None),
    }


def native_steps(binary: str, case: Case, prompt: str, n: int) -> list[tuple[int, int, bool]]:
    """(drafted, accepted, restored) per pass, as llama.cpp logs them."""
    draft = ["-md", str(case.draft)] if case.draft else []
    cmd = [
        binary, "-m", str(case.target), *draft, "-p", prompt, "--no-escape",
        "-n", str(n), "--temp", "0", "-s", "1",
        "--spec-type", case.spec_type,
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
    return [(int(pd), int(pa), True) if pd else (int(d), int(a), False)
            for pa, pd, a, d in RE_STEP.findall(proc.stdout)]


def specdec_steps(stats) -> list[tuple[int, int, bool]]:
    """specdec's passes as llama.cpp logs them: a replay after a restore as (A+1)/(A+1)."""
    out: list[tuple[int, int, bool]] = []
    restored = set(stats.restored_steps)
    for i, (d, a) in enumerate(stats.steps):
        if i - 1 in restored:
            kept = stats.steps[i - 1][1] + 1
            d, a = kept, kept
        out.append((d, a, i in restored))
    return out


def comparable(steps: list[tuple[int, int, bool]], n: int, draft_max: int) -> int:
    """How many of llama.cpp's passes come before its budget cap can shorten a draft (a pass it
    undoes emits nothing until the next one)."""
    done = 0
    for i, (_, acc, restored) in enumerate(steps):
        if n - done - 1 < draft_max:
            return i
        done += 0 if restored else acc + 1
    return len(steps)


def main() -> int:
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--max-tokens", type=int, default=64)
    ap.add_argument("--native-bin", help="llama-speculative-simple (default: $SPECDEC_NATIVE_BIN, else build_native.sh)")
    ap.add_argument("--fixtures", help="folder for the synthetic GGUFs (default: a temporary one)")
    ap.add_argument("--cases", nargs="*", choices=list(SETTINGS), help="only these cases (default: all)")
    args = ap.parse_args()
    binary = find_native(args.native_bin)
    fdir = Path(args.fixtures) if args.fixtures else Path(tempfile.mkdtemp(prefix="specdec-conformance-"))
    pairs = fixtures(fdir)
    n = args.max_tokens
    print(f"native {binary}")
    print(f"fixtures {fdir}; greedy, raw prompts, -n {n}, threads {THREADS}, ctx {CTX}, fa off, f32 KV")
    hdr = (f"{'case':<7} {'dmax':>4} {'p-min':>5}  {'prompt':<26} {'passes':>6} {'restores':>8}  "
           f"{'native dr/acc':>13}  {'specdec dr/acc':>14}  result")
    print(hdr)
    print("-" * len(hdr))
    bad = 0
    total = {"passes": 0, "nd": 0, "na": 0, "restores": 0}
    for label, (target, draft) in pairs.items():
        if args.cases and label not in args.cases:
            continue
        method, snapshots, settings = SETTINGS[label]
        prompts = MEMORY_PROMPTS[:6] if label in MEMORY_CASES else PROMPTS
        for draft_max, p_min in settings:
            case = Case(label, method, target, draft, draft_max, p_min, snapshots)
            engine = Engine(
                target, draft, method=method,
                options=EngineOptions(n_ctx=CTX, n_batch=512, threads=THREADS, flash_attn="off",
                                      cache_type_k="f32", cache_type_v="f32", snapshots=snapshots),
                draft=DraftOptions(draft_max=draft_max, draft_min=0, p_min=p_min),
            )
            for prompt in prompts:
                nat = native_steps(binary, case, prompt, n)
                k = comparable(nat, n, draft_max)
                res = engine.generate(engine.tokenize_prompt(prompt), GenOptions(max_tokens=n + 2 * (draft_max + 1)))
                ours = specdec_steps(res.stats)
                if res.stats.stop_reason == "eog":  # llama.cpp's sampler bans end-of-generation here
                    k = min(k, len(ours))
                a, b = nat[:k], ours[:k]
                nd, na = sum(d for d, _, _ in a), sum(x for _, x, _ in a)
                sd, sa = sum(d for d, _, _ in b), sum(x for _, x, _ in b)
                restores = sum(r for _, _, r in a)
                if a == b:
                    result = "same"
                else:
                    bad += 1
                    i = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
                    result = f"DIFFER at pass {i}: native {a[i] if i < len(a) else '-'} specdec {b[i] if i < len(b) else '-'}"
                total["passes"] += k
                total["nd"] += nd
                total["na"] += na
                total["restores"] += restores
                print(f"{label:<7} {draft_max:>4} {p_min:>5}  {prompt[:26]:<26} {k:>6} {restores:>8}  "
                      f"{nd:>6}/{na:<6}  {sd:>7}/{sa:<6}  {result}")
                sys.stdout.flush()
            engine.close()
    print("-" * len(hdr))
    print(f"{total['passes']} passes compared ({total['restores']} restored), "
          f"{total['nd']} drafted / {total['na']} accepted by llama.cpp; "
          f"{'all identical' if not bad else f'{bad} case(s) differ'}")
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    sys.exit(main())
