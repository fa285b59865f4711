"""The memory estimate against what llama.cpp itself allocates, and the offload choice on faked GPUs."""

from __future__ import annotations

import re

import pytest

from specdec_cli.budget import (
    GiB,
    MiB,
    Settings,
    choose_offload,
    compute_bytes,
    estimate,
    kv_bytes_per_layer,
    parse_layers,
    suggestions,
)
from specdec_cli.devices import Device, cpu_features
from specdec_cli.engine import llama as L
from specdec_cli.engine.llama_context import Context, ContextParams
from specdec_cli.engine.llama_model import Model
from specdec_cli.errors import UsageError
from specdec_cli.gguf_meta import read_gguf


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
