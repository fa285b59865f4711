"""The real pair: Qwen2.5-Coder 1.5B (Q4_K_M) drafted by Qwen2.5-Coder 0.5B, on the CPU.

Quantized weights do not give bit-identical logits for a token evaluated alone and inside
a verify batch, so the rule here is docs/measurements.md's ("Losslessness"): every emitted token is the target's
argmax at its position, and where the output differs from the target alone, the first
divergence is a near-tie (the two tokens' logits in the plain run within 1.0).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions
from specdec_cli.engine.verify.divergence import TIE_LOGITS, argmax_violations, first_divergence

PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "Write a SQL query that returns the ten customers with the highest total order value.",
    "Convert to JSON: name Alice, age 30, city Paris.",
]


@pytest.fixture(scope="module")
def qwen(real_target, real_draft):
    eng = Engine(real_target, real_draft, options=EngineOptions(n_ctx=1024), draft=DraftOptions(draft_max=4))
    yield eng
    eng.close()


def test_chat_renders_the_models_own_template_as_llama_server_does(qwen):
    """Qwen2.5's Jinja template adds its default system prompt when the messages carry none;
    llama.cpp's built-in chatml format leaves it out (llama-server's /apply-template gives this)."""
    got = qwen.render_chat([{"role": "user", "content": "hi"}])
    assert got == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                   "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    own = qwen.render_chat([{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}])
    assert own == "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("prompt", PROMPTS)
def test_real_pair_is_the_targets_output(qwen, prompt):
    tokens = qwen.tokenize_prompt(qwen.render_chat([{"role": "user", "content": prompt}]))
    gen = GenOptions(max_tokens=48)
    plain = qwen.generate(tokens, gen, use_draft=False, trace=True)
    spec = qwen.generate(tokens, gen, trace=True)
    assert argmax_violations(spec.trace) == []
    assert spec.stats.n_drafted > 0 and spec.stats.n_accepted > 0
    div = first_divergence(plain.tokens, plain.trace, spec.tokens)
    if div is None:
        assert spec.tokens == plain.tokens
    else:
        assert div.margin is not None and div.margin <= TIE_LOGITS, div


def test_real_run_reads_stdin_and_reports_counts(real_target, real_draft):
    proc = subprocess.run(
        [sys.executable, "-m", "specdec_cli", "run", "-t", str(real_target), "-d", str(real_draft),
         "--chat", "-n", "24", "--ctx", "512", "--json", "--method", "draft"],
        input="Write a C function that adds two integers.",
        capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"}, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["n_generated"] > 0 and out["n_drafted"] > 0 and out["n_accepted"] > 0
    assert "accepted" in proc.stderr


def test_smollm_cannot_draft_for_qwen(real_target, real_smollm):
    proc = subprocess.run(
        [sys.executable, "-m", "specdec_cli", "check", "--target", str(real_target), "--draft", str(real_smollm)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1
    assert "incompatible" in proc.stdout
    run = subprocess.run(
        [sys.executable, "-m", "specdec_cli", "run", "-t", str(real_target), "-d", str(real_smollm), "hi"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 1 and "vocab" in run.stderr and "Traceback" not in run.stderr


RSS_PROBE = """
import json, sys, psutil
from specdec_cli.engine.llama import library as L
from specdec_cli.engine.decode.engine import DraftOptions, Engine, EngineOptions, GenOptions
L.init_backend()
proc = psutil.Process()
before = proc.memory_info().rss
eng = Engine(sys.argv[1], sys.argv[2], options=EngineOptions(n_ctx=int(sys.argv[3])), draft=DraftOptions(draft_max=4))
eng.generate(eng.tokenize_prompt("def add(a, b):"), GenOptions(max_tokens=2))
print(json.dumps({"rss_increase": proc.memory_info().rss - before}))
"""


@pytest.mark.parametrize("n_ctx", [4096, 8192])
def test_host_memory_estimate_within_ten_percent(real_target, real_draft, n_ctx):
    """Load both models and run a step in a fresh process; its RSS growth vs the estimate."""
    from specdec_cli.memory.budget import plan
    from specdec_cli.models.meta import read_gguf

    proc = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, str(real_target), str(real_draft), str(n_ctx)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = json.loads(proc.stdout.strip().splitlines()[-1])["rss_increase"]
    est = plan(read_gguf(real_target), read_gguf(real_draft), n_ctx=n_ctx, draft_max=4)
    estimated = est.used("CPU")
    assert abs(estimated - measured) / measured < 0.10, (estimated, measured)


def test_real_demo_runs_both_cases_and_explains(real_target, real_draft):
    proc = subprocess.run([sys.executable, "-m", "specdec_cli", "demo", "-n", "8"], capture_output=True, text=True,
                          env={**os.environ, "NO_COLOR": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "writing new code:" in proc.stderr and "editing a given file:" in proc.stderr
    assert "one decode step takes" in proc.stderr and "auto" in proc.stderr
