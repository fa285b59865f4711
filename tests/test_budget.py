"""The memory estimate against what llama.cpp itself allocates, and the offload choice on faked GPUs."""

from __future__ import annotations

import re

import pytest

from specdec_cli.engine.llama import library as L
from specdec_cli.engine.llama.context import Context, ContextParams
from specdec_cli.engine.llama.model import Model
from specdec_cli.errors import UsageError
from specdec_cli.memory.budget import parse_layers
from specdec_cli.memory.devices import Device, cpu_features
from specdec_cli.memory.needs import GiB, MiB, Settings, compute_bytes, kv_bytes_per_layer
from specdec_cli.memory.placement import choose_offload, estimate, suggestions
from specdec_cli.models.meta import read_gguf


def logged_mib(pattern: str) -> float:
    hits = [ln for ln in L.LOG.lines if pattern in ln]
    return float(re.search(r"=\s+([\d.]+) MiB", hits[-1]).group(1))


@pytest.mark.parametrize("n_ctx", [256, 1000, 4096])
@pytest.mark.parametrize(
    "which,cache",
    # quantized caches need a head size divisible by 32: the draft's heads are 16 wide
    [("tiny_target", c) for c in ("f32", "f16", "q8_0", "q4_0")] + [("tiny_draft", c) for c in ("f32", "f16")],
)
def test_kv_formula_matches_llama_cpp(request, which, cache, n_ctx):
    path = request.getfixturevalue(which)
    info = read_gguf(path)
    model = Model(path)
    try:
        L.LOG.lines.clear()
        ctx = Context(model, ContextParams(n_ctx=n_ctx, flash_attn="on", cache_type_k=cache, cache_type_v=cache))
        ctx.close()
    finally:
        model.close()
    expected = logged_mib("KV buffer size =")
    ours = sum(kv_bytes_per_layer(info, Settings(n_ctx=n_ctx, cache_type_k=cache, cache_type_v=cache))) / MiB
    assert ours == pytest.approx(expected, abs=0.01)


@pytest.mark.parametrize("flash", ["on", "off"])
@pytest.mark.parametrize("n_ubatch", [128, 512])
def test_compute_formula_matches_llama_cpp(tiny_target, flash, n_ubatch):
    info = read_gguf(tiny_target)
    model = Model(tiny_target)
    try:
        L.LOG.lines.clear()
        Context(model, ContextParams(n_ctx=2048, n_batch=n_ubatch, n_ubatch=n_ubatch, flash_attn=flash)).close()
    finally:
        model.close()
    expected = logged_mib("compute buffer size =")
    ours = compute_bytes(info, Settings(n_ctx=2048, n_ubatch=n_ubatch, flash_attn=flash == "on")) / MiB
    assert ours == pytest.approx(expected, rel=0.1)  # fitted on real models; tiny ones within 6%


def test_weights_all_on_host_without_gpus(tiny_target, tiny_draft):
    t, d = read_gguf(tiny_target), read_gguf(tiny_draft)
    host = Device("CPU", "cpu", 64 * GiB, 64 * GiB)
    est = estimate(t, d, [host], Settings(n_ctx=512, cpu_features=cpu_features()))
    weights = sum(c.bytes for c in est.components if c.what == "weights")
    assert weights == sum(x.n_bytes for x in t.tensors) + sum(x.n_bytes for x in d.tensors)
    assert {c.device for c in est.components} == {"CPU"}
    assert est.fits


# --- offload on faked devices ---------------------------------------------------------------


def gpu(name="CUDA0", free_gib=8.0):
    return Device(name, "gpu", int(free_gib * GiB), int(24 * GiB), "fake GPU")


HOST = Device("CPU", "cpu", 64 * GiB, 64 * GiB)


@pytest.fixture(scope="module")
def real_infos(real_target, real_draft):
    return read_gguf(real_target), read_gguf(real_draft)


def test_everything_offloads_when_the_gpu_is_big(real_infos):
    t, d = real_infos
    est = choose_offload(t, d, [HOST, gpu(free_gib=16)], Settings(n_ctx=4096), margin=GiB)
    assert est.ngl_target == t.n_layer + 1 and est.ngl_draft == d.n_layer + 1
    assert est.fits
    on_gpu = {c.what for c in est.components if c.device == "CUDA0"}
    assert {"weights", "KV cache", "compute", "overhead"} <= on_gpu
    # the token embedding stays on the host
    host_weights = sum(c.bytes for c in est.components if c.device == "CPU" and c.what == "weights")
    embd = next(x.n_bytes for x in t.tensors if x.name == "token_embd.weight")
    assert host_weights >= embd


def test_target_first_then_draft_then_margin(real_infos):
    t, d = real_infos
    small = gpu(free_gib=2.0)
    est = choose_offload(t, d, [HOST, small], Settings(n_ctx=4096), margin=GiB // 2)
    assert est.fits
    assert est.ngl_target == t.n_layer + 1  # the target gets the GPU first
    assert est.ngl_draft < d.n_layer + 1  # the draft gets what is left
    tighter = choose_offload(t, d, [HOST, small], Settings(n_ctx=4096), margin=GiB)
    assert tighter.ngl_target < est.ngl_target  # a bigger margin leaves fewer layers on the GPU
    assert est.used("CUDA0") + GiB // 2 <= small.free


def test_fixed_offload_that_does_not_fit_is_short(real_infos):
    t, d = real_infos
    est = choose_offload(t, d, [HOST, gpu(free_gib=1.0)], Settings(n_ctx=4096), margin=GiB, ngl_target=-1, ngl_draft=-1)
    assert not est.fits
    cuda = est.devices[1]
    assert est.short(cuda) > 0
    tips = suggestions(est)
    assert any("--no-draft" in t for t in tips) and any("-ngl" in t for t in tips)


def test_layers_split_across_two_gpus_by_free_memory(real_infos):
    t, _ = real_infos
    est = estimate(t, None, [HOST, gpu("CUDA0", 6), gpu("CUDA1", 2)], Settings(n_ctx=2048), ngl_target=-1)
    kv0 = sum(c.bytes for c in est.components if c.device == "CUDA0" and c.what == "KV cache")
    kv1 = sum(c.bytes for c in est.components if c.device == "CUDA1" and c.what == "KV cache")
    assert kv0 > 2 * kv1 > 0  # layers go 3:1, like the free memory
    out_dev = {c.device for c in est.components if c.what == "weights" and c.device != "CPU"}
    assert out_dev == {"CUDA0", "CUDA1"}


def test_no_gpu_means_no_offload(real_infos):
    t, d = real_infos
    est = choose_offload(t, d, [HOST], Settings(n_ctx=4096), margin=GiB)
    assert est.ngl_target == 0 and est.ngl_draft == 0


def test_a_gpu_this_build_cannot_use_is_ignored(real_infos):
    t, d = real_infos
    unusable = Device("CUDA0", "gpu", 80 * GiB, 80 * GiB, "seen by nvidia-smi", "nvidia-smi", usable=False)
    est = choose_offload(t, d, [HOST, unusable], Settings(n_ctx=4096), margin=GiB)
    assert est.ngl_target == 0 and est.fits


def test_parse_layers():
    assert parse_layers("auto", "-ngl") is None
    assert parse_layers("all", "-ngl") == -1
    assert parse_layers("12", "-ngl") == 12
    with pytest.raises(UsageError, match="-ngl"):
        parse_layers("lots", "-ngl")


# --- recurrent, hybrid, sliding-window and MTP targets ------------------------------------------

from specdec_cli.commands.views import budget_table  # noqa: E402
from specdec_cli.memory.budget import plan  # noqa: E402
from specdec_cli.memory.needs import (  # noqa: E402
    recurrent_bytes_per_layer,
    recurrent_row_bytes,
    recurrent_state_bytes,
)
from specdec_cli.memory.placement import mtp_components  # noqa: E402
from specdec_cli.models.memory_kinds import SNAPSHOT_CAP  # noqa: E402
from tiny_memory_models import (  # noqa: E402,F401  (session fixtures, used by name)
    tiny_gemma3,
    tiny_mamba2,
    tiny_mamba2_draft,
    tiny_qwen35,
    tiny_qwen35_draft,
    tiny_qwen35_mtp,
    write_mamba2_gguf,
    write_qwen35_gguf,
)


@pytest.fixture(scope="module")
def wide_mamba2(tmp_path_factory):
    """States large enough for llama.cpp's two-decimal MiB log to check the formula closely."""
    return write_mamba2_gguf(tmp_path_factory.mktemp("wide_mamba2") / "wide-mamba2.gguf",
                             n_layer=2, n_embd=512, d_state=64, head_dim=64)


@pytest.fixture(scope="module")
def wide_qwen35(tmp_path_factory):
    return write_qwen35_gguf(tmp_path_factory.mktemp("wide_qwen35") / "wide-qwen35.gguf",
                             n_embd=256, d_state=64, n_k_heads=4, n_v_heads=8)


def expected_row(info) -> int:
    """llama.cpp's n_embd_r() + n_embd_s() for a Mamba-2 or Qwen3.5 layer, in f32 bytes, restated
    from llama-hparams.cpp: conv (d_conv - 1) x (d_inner + 2 n_group d_state) + state
    d_state x d_inner (Qwen3.5: d_inner = value_dim, n_group = k heads, d_state = head_v_dim)."""
    k = lambda key: info.kv[f"{info.arch}.ssm.{key}"]  # noqa: E731
    d_inner, d_state = k("inner_size"), k("state_size")
    return 4 * ((k("conv_kernel") - 1) * (d_inner + 2 * k("group_count") * d_state) + d_state * d_inner)


def expected_recurrent_layers(info) -> int:
    if info.arch == "mamba2":
        return info.n_layer
    interval = info.kv["qwen35.full_attention_interval"]
    trunk = info.n_layer - (info.kv.get("qwen35.nextn_predict_layers") or 0)
    return sum(1 for i in range(trunk) if (i + 1) % interval != 0)


def expected_kv_layer(info, n_ctx) -> int:
    """f16 K and V of one attention layer over n_ctx cells (n_ctx a multiple of 256)."""
    return n_ctx * 2 * 2 * info.kv[f"{info.arch}.attention.key_length"] * info.kv[f"{info.arch}.attention.head_count_kv"]


# The RS buffer the budget expects is (recurrent layers) x row x (1 + n_rs_seq). Checked once
# against llama.cpp 0.3.36's own log ("RS buffer size", n_ctx 1024), with the fixtures as they
# were then: mamba2 0.03 MiB at any n_rs_seq (clamped to 0: no bounded rollback); qwen35 0.01 /
# 0.05 / 0.18 MiB at n_rs_seq 0 / 4 / 16; the wide mamba2 0.53 MiB (budget 0.5264); the wide
# qwen35 0.27 / 1.37 / 4.65 MiB (budget 0.2734 / 1.3672 / 4.6484). test_recurrent_state_matches_llama_cpp
# repeats that check live.
@pytest.mark.parametrize("which", ["tiny_mamba2", "tiny_mamba2_draft", "tiny_qwen35", "tiny_qwen35_draft",
                                   "tiny_qwen35_mtp", "wide_mamba2", "wide_qwen35"])
def test_recurrent_state_formula(request, which):
    info = read_gguf(request.getfixturevalue(which))
    row, layers = expected_row(info), expected_recurrent_layers(info)
    assert recurrent_row_bytes(info) == row
    assert recurrent_state_bytes(info) == layers * row
    for n_rs_seq in (0, 4, 16):
        assert sum(recurrent_bytes_per_layer(info, n_rs_seq)) == layers * row * (1 + n_rs_seq)


def test_wide_fixtures_by_hand(wide_mamba2, wide_qwen35):
    # Mamba 2, n_embd 512: d_inner 1024, conv 3 x (1024 + 2 x 64), state 64 x 1024
    assert recurrent_row_bytes(read_gguf(wide_mamba2)) == 4 * (3 * (1024 + 128) + 64 * 1024) == 275_968
    # Qwen3.5, 4 k heads and 8 v heads of 64: d_inner 512, conv 3 x (512 + 2 x 4 x 64), state 64 x 512
    assert recurrent_row_bytes(read_gguf(wide_qwen35)) == 4 * (3 * (512 + 512) + 64 * 512) == 143_360


@pytest.mark.parametrize("n_rs_seq", [0, 4])
@pytest.mark.parametrize("which", ["tiny_mamba2", "tiny_qwen35", "wide_mamba2", "wide_qwen35"])
def test_recurrent_state_matches_llama_cpp(request, which, n_rs_seq):
    path = request.getfixturevalue(which)
    info = read_gguf(path)
    model = Model(path)
    try:
        L.LOG.lines.clear()
        ctx = Context(model, ContextParams(n_ctx=1024, flash_attn="on", n_rs_seq=n_rs_seq))
        granted = ctx.n_rs_seq  # llama.cpp clamps it to 0 where the architecture has no snapshots
        ctx.close()
    finally:
        model.close()
    assert granted == (n_rs_seq if info.arch == "qwen35" else 0)
    ours = sum(recurrent_bytes_per_layer(info, granted)) / MiB
    assert ours == pytest.approx(logged_mib("RS buffer size ="), abs=0.006)
    if info.kv_layers:  # the hybrid's attention layers keep their KV cache, and only they
        kv = sum(kv_bytes_per_layer(info, Settings(n_ctx=1024))) / MiB
        assert kv == pytest.approx(logged_mib("KV buffer size ="), abs=0.006)


@pytest.mark.parametrize("which", ["tiny_mamba2", "tiny_qwen35_draft"])
def test_checkpoint_is_one_copy_of_the_state(request, which):
    """What the engine copies out (llama.cpp's PARTIAL_ONLY sequence state) is the state plus a
    few header bytes."""
    path = request.getfixturevalue(which)
    info = read_gguf(path)
    model = Model(path)
    try:
        ctx = Context(model, ContextParams(n_ctx=256))
        ctx.decode([5, 6, 7], 0)
        size = ctx.state_size()
        ctx.close()
    finally:
        model.close()
    assert recurrent_state_bytes(info) == pytest.approx(size, rel=0.01)
    assert recurrent_state_bytes(info) <= size


def parts(est, what, model="target"):
    return sum(c.bytes for c in est.components if c.what == what and c.model == model)


def test_snapshots_scale_with_draft_max_and_stop_at_16(tiny_qwen35):
    info = read_gguf(tiny_qwen35)
    state = recurrent_state_bytes(info)
    for draft_max, expected in ((1, 1), (4, 4), (16, 16), (32, 16), (64, 16)):
        est = estimate(info, None, [HOST], Settings(n_ctx=512, method="ngram", draft_max=draft_max))
        assert est.n_rs_seq == expected == min(draft_max, SNAPSHOT_CAP)
        assert parts(est, "snapshots") == expected * state
        assert parts(est, "recurrent state") == state  # the live row, apart from the snapshots
        assert parts(est, "checkpoint") == 0  # snapshots need no copy
        assert est.rollback == {"target": "snapshots"}
    alone = estimate(info, None, [HOST], Settings(n_ctx=512))  # nothing drafts: no snapshots
    assert alone.n_rs_seq == 0 and parts(alone, "snapshots") == 0 and alone.rollback == {}


def test_hybrid_pair_snapshots_the_target_and_checkpoints_the_draft(tiny_qwen35, tiny_qwen35_draft):
    t, d = read_gguf(tiny_qwen35), read_gguf(tiny_qwen35_draft)
    assert recurrent_state_bytes(d) > 0
    est = estimate(t, d, [HOST], Settings(n_ctx=1024, draft_max=8))
    assert est.method == "draft" and est.rollback == {"target": "snapshots", "draft": "checkpoint"}
    assert parts(est, "snapshots") == 8 * recurrent_state_bytes(t)
    assert parts(est, "checkpoint") == 0
    draft_ckpt = [c for c in est.components if c.what == "checkpoint"]
    assert [(c.model, c.device, c.bytes) for c in draft_ckpt] == [("draft", "CPU", recurrent_state_bytes(d))]
    # the hybrid's KV cache is its attention layers' only
    assert parts(est, "KV cache") == len(t.kv_layers) * expected_kv_layer(t, 1024)
    d_json = est.to_dict()
    assert (d_json["method"], d_json["draft_max"], d_json["n_rs_seq"]) == ("draft", 8, 8)
    assert d_json["rollback"] == {"target": "snapshots", "draft": "checkpoint"}


def test_recurrent_pair_checkpoints_both(tiny_mamba2, tiny_mamba2_draft):
    t, d = read_gguf(tiny_mamba2), read_gguf(tiny_mamba2_draft)
    est = estimate(t, d, [HOST], Settings(n_ctx=1024, draft_max=16))
    assert est.n_rs_seq == 0 and parts(est, "snapshots") == 0  # mamba2 has no bounded rollback
    assert est.rollback == {"target": "checkpoint", "draft": "checkpoint"}
    assert parts(est, "checkpoint") == recurrent_state_bytes(t)
    assert parts(est, "checkpoint", "draft") == recurrent_state_bytes(d)
    assert all(c.device == "CPU" for c in est.components if c.what == "checkpoint")
    assert parts(est, "KV cache") == 0 and parts(est, "recurrent state") == recurrent_state_bytes(t)
    # n-gram drafting on the same target: the target's checkpoint only
    ngram = estimate(t, None, [HOST], Settings(n_ctx=1024, method="ngram"))
    assert [c.model for c in ngram.components if c.what == "checkpoint"] == ["target"]


def test_recurrent_state_goes_where_its_layer_goes(tiny_mamba2):
    info = read_gguf(tiny_mamba2)
    est = estimate(info, None, [HOST, gpu()], Settings(n_ctx=1024, method="ngram"), ngl_target=2)
    # n_layer + output slots: the last 2 (the last layer and the output) on the GPU
    assert parts(est, "recurrent state") == recurrent_state_bytes(info)
    on_gpu = sum(c.bytes for c in est.components if c.what == "recurrent state" and c.device == "CUDA0")
    assert on_gpu == recurrent_row_bytes(info)
    assert [c.device for c in est.components if c.what == "checkpoint"] == ["CPU"]


def test_mtp_weights_count_only_when_mtp_drafts(tiny_qwen35_mtp):
    info = read_gguf(tiny_qwen35_mtp)
    nextn = sum(t.n_bytes for t in info.tensors if t.name.startswith(f"blk.{info.n_layer - 1}."))
    assert nextn > 0
    everything = sum(t.n_bytes for t in info.tensors)
    for method in (None, "ngram", "auto"):  # llama.cpp skips the nextn tensors: not loaded
        est = estimate(info, None, [HOST], Settings(n_ctx=1024, method=method))
        assert parts(est, "weights") == everything - nextn
        assert not any(c.what.startswith("MTP") for c in est.components)
    est = estimate(info, None, [HOST], Settings(n_ctx=1024, method="mtp", draft_max=3))
    assert parts(est, "weights") == everything
    # the MTP context: one attention layer x 1024 cells, compute, output
    assert parts(est, "MTP KV cache") == expected_kv_layer(info, 1024)
    assert parts(est, "MTP compute") > 0 and parts(est, "MTP output") > 0
    assert est.rollback == {"target": "snapshots"} and est.n_rs_seq == 3
    # the main context's KV cache never holds the nextn layer
    assert parts(est, "KV cache") == len(info.kv_layers) * expected_kv_layer(info, 1024)


def test_mtp_kv_matches_llama_cpp(tiny_qwen35_mtp):
    info = read_gguf(tiny_qwen35_mtp)
    model = Model(tiny_qwen35_mtp, load_mtp=True)
    try:
        L.LOG.lines.clear()
        Context(model, ContextParams(n_ctx=1024, flash_attn="on")).close()
        main_kv = logged_mib("KV buffer size =")
        L.LOG.lines.clear()
        Context(model, ContextParams(n_ctx=1024, flash_attn="on", mtp=True)).close()
        mtp_kv = logged_mib("KV buffer size =")
    finally:
        model.close()
    assert sum(kv_bytes_per_layer(info, Settings(n_ctx=1024))) / MiB == pytest.approx(main_kv, abs=0.006)
    mtp = mtp_components(info, 0, Settings(n_ctx=1024), [])
    assert sum(c.bytes for c in mtp if c.what == "MTP KV cache") / MiB == pytest.approx(mtp_kv, abs=0.006)


@pytest.mark.parametrize("n_ctx", [256, 4096])
def test_sliding_window_layers_as_specdec_creates_them(tiny_gemma3, n_ctx):
    """specdec's contexts keep llama.cpp's default swa_full: the window layers get n_ctx cells."""
    info = read_gguf(tiny_gemma3)
    model = Model(tiny_gemma3)
    try:
        L.LOG.lines.clear()
        Context(model, ContextParams(n_ctx=n_ctx, flash_attn="on")).close()
    finally:
        model.close()
    logged = sum(float(re.search(r"=\s+([\d.]+) MiB", ln).group(1)) for ln in L.LOG.lines if "KV buffer size =" in ln)
    assert sum(kv_bytes_per_layer(info, Settings(n_ctx=n_ctx))) / MiB == pytest.approx(logged, abs=0.011)


@pytest.mark.parametrize("n_ctx,n_ubatch", [(4096, 512), (4096, 128), (512, 512)])
def test_sliding_window_cells_without_swa_full(tiny_gemma3, monkeypatch, n_ctx, n_ubatch):
    """With swa_full off, window layers keep min(n_ctx, n_swa + n_ubatch) cells padded to 256."""
    ll = L.bindings()
    default = ll.llama_context_default_params

    def no_swa_full():
        p = default()
        p.swa_full = False
        return p

    monkeypatch.setattr(ll, "llama_context_default_params", no_swa_full)
    info = read_gguf(tiny_gemma3)
    model = Model(tiny_gemma3)
    try:
        L.LOG.lines.clear()
        Context(model, ContextParams(n_ctx=n_ctx, n_batch=n_ubatch, n_ubatch=n_ubatch, flash_attn="on")).close()
    finally:
        model.close()
    logged = sum(float(re.search(r"=\s+([\d.]+) MiB", ln).group(1)) for ln in L.LOG.lines if "KV buffer size =" in ln)
    s = Settings(n_ctx=n_ctx, n_ubatch=n_ubatch, swa_full=False)
    assert sum(kv_bytes_per_layer(info, s)) / MiB == pytest.approx(logged, abs=0.011)
    swa = [ln for ln in L.LOG.lines if "creating     SWA KV cache" in ln][-1]
    assert int(re.search(r"size = (\d+) cells", swa).group(1)) == min(n_ctx, -(-(info.n_swa + n_ubatch) // 256) * 256)


def test_plan_carries_method_and_draft_max(tiny_qwen35_mtp):
    info = read_gguf(tiny_qwen35_mtp)
    est = plan(info, None, n_ctx=1024, draft_max=6, method="mtp", devices=[HOST])
    assert est.method == "mtp" and est.n_rs_seq == 6 and est.settings.n_outputs_target == 7
    assert any(c.what == "MTP KV cache" for c in est.components)
    # the callers of today, with no method: the target alone (or its draft model)
    old = plan(info, None, n_ctx=1024, devices=[HOST])
    assert old.method is None and old.n_rs_seq == 0 and old.settings.n_outputs_target == 1
    assert not any(c.what.startswith("MTP") for c in old.components)


def test_shorter_drafts_suggested_when_snapshots_weigh(wide_qwen35):
    info = read_gguf(wide_qwen35)
    tight = Device("CPU", "cpu", 1 * MiB, 64 * GiB)
    est = estimate(info, None, [tight], Settings(n_ctx=512, method="ngram", draft_max=16))
    assert not est.fits
    assert any("--draft-max 8" in tip for tip in suggestions(est))


def test_budget_table_names_the_rollback(tiny_qwen35, tiny_qwen35_draft):
    import io

    from rich.console import Console

    buf = io.StringIO()
    est = estimate(read_gguf(tiny_qwen35), read_gguf(tiny_qwen35_draft), [HOST], Settings(n_ctx=512, draft_max=4))
    budget_table(est, Console(file=buf, width=200, no_color=True))
    text = buf.getvalue()
    assert "snapshots" in text and "checkpoint" in text and "recurrent state" in text
    assert ("rollback: target keeps 4 recurrent-state snapshots (n_rs_seq 4); "
            "draft checkpoints its recurrent state in host memory") in text


def test_auto_with_mtp_layers_loads_them_as_the_engine_does(tiny_qwen35_mtp, tiny_qwen35_draft):
    info = read_gguf(tiny_qwen35_mtp)
    auto = plan(info, None, n_ctx=1024, draft_max=4, method="auto", mtp=True, devices=[HOST])
    assert any(c.what == "MTP KV cache" for c in auto.components)
    assert parts(auto, "weights") == sum(t.n_bytes for t in info.tensors)
    # a draft model given: the engine does not load the MTP layers
    with_draft = plan(info, read_gguf(tiny_qwen35_draft), n_ctx=1024, method="auto", mtp=True, devices=[HOST])
    assert not any(c.what.startswith("MTP") for c in with_draft.components)
