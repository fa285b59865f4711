"""Where a restored prompt's answer parts from the cold read's: is it a near-tie?

Reads the entry ``prompt_cache_restart.py`` left in its cache folder (the cold run's cells: its
prompt and its answer) and its ``--json`` figures, restores the prompt's cells, then feeds the
cold answer one token a pass, as the restored run computed it, and stops at the first position
where the target's top token is not the cold run's: both candidates' logits and their margin.
A margin of a few hundredths of a logit is a near-tie that a pass of another shape (the cold
run's drafted pass, or its last prompt chunk) tips the other way (``../shared/notes``' method).

    python3 scripts/checks/restore_tie.py --model T --cache /tmp/specdec-prompts-XXXX --runs restart.json --ctx 20480
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for _shared
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for specdec_cli

from _shared.script_io import Parser  # noqa: E402

from specdec_cli.engine.decode.engine import Engine  # noqa: E402
from specdec_cli.engine.options import EngineOptions  # noqa: E402
from specdec_cli.engine.promptcache.cache import Hit, open_cache  # noqa: E402


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="the target GGUF the server ran")
    ap.add_argument("--cache", required=True, help="the cache folder the restart script made (its server's {cache})")
    ap.add_argument("--runs", required=True, help="the restart script's --json file")
    ap.add_argument("--ctx", type=int, default=8192)
    args = ap.parse_args()
    runs = json.loads(Path(args.runs).read_text())["runs"]
    eng = Engine(args.model, None, options=EngineOptions(n_ctx=args.ctx))
    try:
        cache = open_cache(Path(args.model), cache_type_k="f16", cache_type_v="f16", flash_attn="auto",
                           folder=Path(args.cache), disk_cap=1 << 40, note=print)
        if cache.disk is None or len(cache.disk.entries) != 1:
            ap.error(f"{args.cache} does not hold one entry of {Path(args.model).name}")
        ((name, entry),) = cache.disk.entries.items()
        tokens = entry.tokens.tolist()
        n_prompt = runs[0]["n_prompt"]
        cold = tokens[n_prompt:]
        if cache.restore(eng.target_ctx, 0, Hit("disk", name, n_prompt - 1)) != n_prompt - 1:
            sys.exit("error: llama.cpp refused the entry's cells")
        model, text = eng.target_model, ""
        for i, tok in enumerate(tokens[n_prompt - 1 : -1]):
            text += model.token_text(tok) if i else ""
            eng.target_ctx.decode([tok], n_prompt - 1 + i, outputs="last")
            logits = eng.target_ctx.logits(0).astype(np.float64)
            top = [int(k) for k in np.argsort(-logits)[:3]]
            if top[0] != cold[i]:
                print(f"output token {i}, after {text[-60:]!r}:")
                print(f"  the cold run chose {model.token_text(cold[i])!r} at {logits[cold[i]]:.4f}; one token a pass, "
                      "the top three: " + ", ".join(f"{model.token_text(k)!r} {logits[k]:.4f}" for k in top))
                print(f"  margin {abs(logits[top[0]] - logits[cold[i]]):.4f} logits")
                return 0
        print(f"one token a pass gives the cold answer's {len(cold)} kept tokens: no divergence here")
    finally:
        eng.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
