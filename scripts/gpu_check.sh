#!/usr/bin/env bash
# One-shot GPU check on a CUDA machine with no internet: build llama-cpp-python for CUDA from a
# source tarball, then run specdec's many-at-once path on the GPU and keep what it measured.
#
#   bash scripts/gpu_check.sh SDIST.tar[.xz|.gz] [WHEEL_DIR] [OUT_DIR]
#
# WHEEL_DIR holds wheels for the Python packages the machine lacks (installed with --no-index).
# The models are random-weight GGUFs written on the spot with the test suite's writer, shaped
# like Qwen2.5 1.5B (target) and 0.5B (draft): their text means nothing, so what this shows is
# the machine's cost curve, what specdec decides from it (sequences at once, drafts), and that
# batched output equals one-at-a-time output on CUDA, not a speedup to quote for real models.
set -uo pipefail
SDIST=${1:?usage: gpu_check.sh SDIST [WHEEL_DIR] [OUT_DIR]}
WHEELS=${2:-}
OUT=${3:-${OUT:-/tmp/gpu_check}}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SITE=${SITE:-/tmp/specdec_site}
WORK=${WORK:-/tmp/specdec_gpu}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT" "$SITE" "$WORK"
export PYTHONUNBUFFERED=1 PYTHONPATH="$SITE:$ROOT" NO_COLOR=1
stamp() { echo "== $(date +%T) $*"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
if [ -n "$WHEELS" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl || exit 1
fi

stamp "build llama-cpp-python (CUDA, sm_90, $JOBS jobs)"
t0=$(date +%s)
if [ ! -d "$SITE/llama_cpp/lib" ]; then
tar xf "$SDIST" -C "$WORK" || exit 1
src=$(find "$WORK" -maxdepth 1 -type d -name 'llama_cpp_python-*' | head -1)
# Flash-attention kernels are left out to keep the build inside a short lease; specdec's
# --flash-attn auto then runs without them.
( cd "$src" && CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF -DLLAVA_BUILD=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL=$JOBS python3 -m pip install -q --no-deps --no-build-isolation --no-cache-dir \
    --target "$SITE" . ) > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
fi
echo "built in $(( $(date +%s) - t0 )) s"

stamp "models"
[ -f "$WORK/draft-0.5b-shape.gguf" ] || python3 - "$WORK" <<'EOF' || exit 1
import sys, time
from pathlib import Path
sys.path.insert(0, "tests")
from tiny_models import write_llama_gguf
w = Path(sys.argv[1])
t0 = time.time()
write_llama_gguf(w / "target-1.5b-shape.gguf", n_layer=28, n_embd=1536, n_head=12, n_head_kv=2, n_ff=8960,
                 n_ctx_train=32768, name="gpu-check target", basename="GPU-Check", size_label="1.5B", seed=1)
write_llama_gguf(w / "draft-0.5b-shape.gguf", n_layer=24, n_embd=896, n_head=14, n_head_kv=2, n_ff=4864,
                 n_ctx_train=32768, name="gpu-check draft", basename="GPU-Check", size_label="0.5B", seed=1)
print(f"written in {time.time() - t0:.0f} s")
EOF
T=$WORK/target-1.5b-shape.gguf
D=$WORK/draft-0.5b-shape.gguf
JOBSFILE=$WORK/jobs.jsonl
for i in 1 2; do cat "$ROOT/scripts/data/batch_jobs.jsonl"; done | python3 -c '
import json, sys
for i, line in enumerate(sys.stdin):
    rec = json.loads(line); rec["id"] = f"job-{i}"; print(json.dumps(rec))' > "$JOBSFILE"

stamp "budget"
python3 -m specdec_cli budget -t "$T" -d "$D" -c 4096 2>&1 | tee "$OUT/budget.txt"

stamp "control: llama-cpp-python's own Llama on the GPU"
python3 -c "
import sys, llama_cpp
m = llama_cpp.Llama(sys.argv[1], n_gpu_layers=-1, n_ctx=512, verbose=False)
print('control ok:', repr(m('The report says', max_tokens=8, temperature=0)['choices'][0]['text']))
" "$T" 2>&1 | tail -3

stamp "smoke: one short prompt"
# a crash leaves the Python stack (faulthandler) and a native backtrace (cuda-gdb)
if ! PYTHONFAULTHANDLER=1 python3 -m specdec_cli run -t "$T" "The report says" -n 8 --no-draft \
        > "$OUT/smoke.txt" 2> "$OUT/smoke.err"; then
    tail -25 "$OUT/smoke.err"
    if command -v cuda-gdb > /dev/null; then
        timeout 120 cuda-gdb -q -batch -ex run -ex bt --args python3 -m specdec_cli run -t "$T" \
            "The report says" -n 8 --no-draft > "$OUT/gdb.txt" 2>&1
        grep -E "^#|signal|SIG" "$OUT/gdb.txt" | head -30
    fi
    exit 1
fi

run() {  # label, then specdec run options; a failed run is repeated with llama.cpp's log shown
    local label=$1; shift
    stamp "run $label"
    if ! timeout 120 python3 -m specdec_cli run -t "$T" --batch "$JOBSFILE" -n 192 "$@" \
            > "$OUT/$label.jsonl" 2> "$OUT/$label.err"; then
        timeout 120 python3 -m specdec_cli run -t "$T" --batch "$JOBSFILE" -n 192 --verbose "$@" 2>&1 >/dev/null \
            | grep -v '^\[' | tail -30 > "$OUT/$label.verbose"
        tail -12 "$OUT/$label.verbose"
    fi
    grep -v '^\[' "$OUT/$label.err" | tail -3
}
run one-at-a-time --parallel 1 --no-draft
run auto-1 --parallel 1 -d "$D"
run plain-all --parallel 24 --no-draft
run auto-all --parallel 24 -d "$D"
run plain-auto-n --no-draft
run auto -d "$D"

stamp "same text batched as alone"
python3 - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def texts(name):
    return {r["id"]: r.get("text") for r in map(json.loads, (out / f"{name}.jsonl").read_text().splitlines())}
base = texts("one-at-a-time")
for name in ("auto-1", "plain-all", "auto-all", "plain-auto-n", "auto"):
    if not (out / f"{name}.jsonl").exists():
        continue
    other = texts(name)
    same = sum(other.get(k) == v for k, v in base.items())
    print(f"{name:14s} {same}/{len(base)} prompts identical to one at a time")
EOF
cp ~/.cache/specdec/costs.json "$OUT/costs.json" 2>/dev/null
stamp done
