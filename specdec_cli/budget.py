"""Memory a target+draft setup needs, per device, from GGUF metadata alone (no weights loaded).

Running out of memory is the commonest way a speculative setup fails: the draft needs
weights, a KV cache and compute buffers of its own. ``estimate`` adds up, per device:

- **weights**, placed by llama.cpp's rules (``llama_model_base::load_tensors``): the token
  embedding stays on the host; with ``ngl`` GPU layers the last ``ngl`` of the
  ``n_layer + 1`` slots (the repeating layers, then the output layer) go to the GPUs, split
  across several GPUs in proportion to their free memory. On the CPU, weights of the types
  ggml repacks for this CPU (``ggml-cpu/repack.cpp``: Q4_0/Q4_K/IQ4_NL/MXFP4 with AVX2, more
  on ARM with i8mm) are copied into a repacked buffer while the file stays mapped, so they
  count twice in host memory;
- **KV cache**, per layer ``n_ctx x (n_embd_k_gqa + n_embd_v_gqa)`` at the cache type's size,
  on the layer's device. Sliding-window layers keep only ``n_swa + n_ubatch`` cells,
  recurrent layers (head_count_kv 0 in a per-layer list) keep a fixed-size state instead;
- **compute buffers**, from a fit to llama.cpp's own logged sizes (see ``compute_bytes``);
- **the output buffer**, ``n_outputs x n_vocab`` floats on the host;
- **a fixed overhead** per GPU backend (driver context, library workspaces).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .devices import Device
from .gguf_meta import GGUFInfo

GiB = 1024**3
MiB = 1024**2
KV_PAD = 256  # llama.cpp pads the KV cache size to a multiple of 256 cells

# bytes per element of the KV cache types (ggml block sizes)
CACHE_TYPE_BYTES = {
    "f32": 4.0, "f16": 2.0, "bf16": 2.0,
    "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32,
}

# Per-backend overhead beyond the buffers llama.cpp logs: the CUDA context, cuBLAS
# workspace and similar. Not measured on this project's machines (no GPU here): these are
# deliberately conservative round figures; the margin covers the rest.
BACKEND_OVERHEAD = {"CUDA": 350 * MiB, "ROCm": 350 * MiB, "Metal": 64 * MiB, "Vulkan": 200 * MiB, "SYCL": 350 * MiB}
DEFAULT_OVERHEAD = 256 * MiB

# Weight types ggml-cpu repacks into an extra buffer, by CPU feature (repack.cpp).
_REPACK_X86_AVX2 = {"Q4_0", "Q4_K", "IQ4_NL", "MXFP4"}
_REPACK_X86_AVX512 = {"Q2_K"}
_REPACK_ARM_I8MM = {"Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q8_0", "IQ4_NL", "Q1_0"}
_REPACK_ARM_DOTPROD = {"Q4_0", "IQ4_NL", "Q8_0"}

# Sliding-window layer patterns llama.cpp hard-codes per architecture (every Nth layer is full).
_SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gemma3n": 5}


def repack_types(features: set[str]) -> set[str]:
    types: set[str] = set()
    if "AVX2" in features:
        types |= _REPACK_X86_AVX2
    if "AVX512" in features:
        types |= _REPACK_X86_AVX512
    if "NEON" in features and "MATMUL_INT8" in features:
        types |= _REPACK_ARM_I8MM
    elif "NEON" in features and "DOTPROD" in features:
        types |= _REPACK_ARM_DOTPROD
    if "REPACK" not in features and features:
        return set()
    return types


@dataclass
class Settings:
    n_ctx: int = 4096
    n_ubatch: int = 512
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: bool = True  # llama.cpp's "auto" turns it on where the backend supports it
    n_outputs_target: int = 5  # draft_max + 1
    cpu_features: set[str] = field(default_factory=set)


@dataclass
class Component:
    model: str  # "target" | "draft"
    what: str  # weights | repacked weights | KV cache | compute | output | overhead
    device: str
    bytes: int


@dataclass
class Estimate:
    components: list[Component]
    devices: list[Device]
    margin: int = 0  # bytes kept free on each GPU
    ngl_target: int = 0
    ngl_draft: int = 0
    settings: Settings = field(default_factory=Settings)

    def used(self, device: str) -> int:
        return sum(c.bytes for c in self.components if c.device == device)

    def short(self, dev: Device) -> int:
        """Bytes missing on ``dev`` (0 when it fits, margin included on GPUs)."""
        need = self.used(dev.name) + (self.margin if dev.is_gpu else 0)
        return max(0, need - dev.free)

    @property
    def fits(self) -> bool:
        return all(self.short(d) == 0 for d in self.devices if d.usable)

    def to_dict(self) -> dict:
        return {
            "fits": self.fits,
            "ngl_target": self.ngl_target,
            "ngl_draft": self.ngl_draft,
            "margin": self.margin,
            "components": [c.__dict__ for c in self.components],
            "devices": [
                {**d.to_dict(), "needed": self.used(d.name), "short": self.short(d)} for d in self.devices
            ],
        }


# --- the pieces -----------------------------------------------------------------------------


def kv_cells(n_ctx: int) -> int:
    return max(KV_PAD, math.ceil(n_ctx / KV_PAD) * KV_PAD)


def _arch_key(info: GGUFInfo, key: str):
    return info.kv.get(f"{info.arch}.{key}")


def _per_layer(value, n_layer: int, default) -> list:
    if isinstance(value, list):
        return list(value) + [value[-1] if value else default] * (n_layer - len(value))
    return [value if value is not None else default] * n_layer


def kv_bytes_per_layer(info: GGUFInfo, s: Settings) -> list[int]:
    """KV cache bytes of each layer, as llama.cpp allocates them."""
    n_layer = info.n_layer or 0
    n_head = _per_layer(_arch_key(info, "attention.head_count"), n_layer, 1)
    n_head_kv = _per_layer(_arch_key(info, "attention.head_count_kv"), n_layer, None)
    n_embd = info.n_embd or 0
    cells = kv_cells(s.n_ctx)
    n_swa = _arch_key(info, "attention.sliding_window") or 0
    swa_layers = _swa_layers(info, n_layer) if n_swa else set()
    k_size, v_size = CACHE_TYPE_BYTES[s.cache_type_k], CACHE_TYPE_BYTES[s.cache_type_v]
    out = []
    for il in range(n_layer):
        heads_kv = n_head_kv[il] if n_head_kv[il] is not None else n_head[il]
        if heads_kv == 0:  # a recurrent layer in a hybrid model: no KV cache
            out.append(_recurrent_state_bytes(info))
            continue
        head_dim = n_embd // max(1, n_head[il])
        k_dim = (_arch_key(info, "attention.key_length") or head_dim) * heads_kv
        v_dim = (_arch_key(info, "attention.value_length") or head_dim) * heads_kv
        n_cells = min(cells, kv_cells(n_swa + s.n_ubatch)) if il in swa_layers else cells
        out.append(int(n_cells * (k_dim * k_size + v_dim * v_size)))
    return out


def _swa_layers(info: GGUFInfo, n_layer: int) -> set[int]:
    pattern = _arch_key(info, "attention.sliding_window_pattern")
    if isinstance(pattern, list):
        return {i for i, is_swa in enumerate(pattern) if is_swa}
    period = pattern if isinstance(pattern, int) and pattern > 0 else _SWA_PATTERN.get(info.arch, 0)
    if period <= 1:
        return set(range(n_layer)) if period == 1 else set()
    return {i for i in range(n_layer) if (i + 1) % period != 0}


def _recurrent_state_bytes(info: GGUFInfo) -> int:
    """Mamba-style conv + SSM state of one layer for one sequence (f32), independent of n_ctx."""
    d_conv = _arch_key(info, "ssm.conv_kernel") or 0
    d_inner = _arch_key(info, "ssm.inner_size") or 0
    d_state = _arch_key(info, "ssm.state_size") or 0
    n_group = _arch_key(info, "ssm.group_count") or 0
    conv = max(0, d_conv - 1) * (d_inner + 2 * n_group * d_state)
    return int(4 * (conv + d_state * d_inner))


def compute_bytes(info: GGUFInfo, s: Settings) -> int:
    """The scheduler's compute buffer for one model.

    Fitted to the sizes llama.cpp 0.3.36 logs ("compute buffer size") on the CPU for
    Qwen2.5-Coder 1.5B and 0.5B and SmolLM2 135M, at n_ubatch 128 and 512, n_ctx 2048 and
    8192, flash attention on and off; the fit is within 0.01 MiB on all 24 points:
    - with flash attention: n_ubatch x 4 bytes x (3 n_ff + 4 n_embd) for the activations,
      plus the f16 mask, n_ctx x n_ubatch x 2 bytes;
    - without: the attention scores, n_ctx x n_ubatch x (4 n_head + 4) bytes, plus
      n_ubatch x 4 bytes x 16/3 n_embd, or the activations figure if larger.
    """
    n_embd = info.n_embd or 0
    n_ff = info.n_ff or 4 * n_embd
    ub = s.n_ubatch
    cells = kv_cells(s.n_ctx)
    activations = ub * 4 * (3 * n_ff + 4 * n_embd)
    if s.flash_attn:
        return int(activations + cells * ub * 2)
    n_head = max(_per_layer(_arch_key(info, "attention.head_count"), max(1, info.n_layer or 1), 1))
    scores = cells * ub * (4 * n_head + 4) + ub * 4 * (16 * n_embd) // 3
    return int(max(activations, scores))


def output_bytes(info: GGUFInfo, n_outputs: int) -> int:
    return 4 * n_outputs * info.n_vocab


# --- placement ------------------------------------------------------------------------------


def _layer_devices(n_layer: int, ngl: int, gpus: list[Device]) -> list[str]:
    """Device of each of the n_layer + 1 slots (repeating layers, then output), as llama.cpp places them."""
    slots = n_layer + 1
    ngl = slots if ngl < 0 else min(ngl, slots)
    if not gpus or ngl == 0:
        return ["CPU"] * slots
    start = slots - ngl
    total_free = sum(g.free for g in gpus) or 1
    bounds, acc = [], 0.0
    for g in gpus:
        acc += g.free / total_free
        bounds.append(acc)
    out = []
    for il in range(slots):
        if il < start:
            out.append("CPU")
            continue
        frac = (il - start) / ngl
        idx = next((i for i, b in enumerate(bounds) if frac < b), len(gpus) - 1)
        out.append(gpus[idx].name)
    return out


def _slot_of(name: str, n_layer: int) -> int | None:
    """Layer slot of a tensor: None = the input (host), n_layer = the output layer."""
    if name.startswith("blk."):
        return int(name.split(".")[1])
    if name.startswith("output") or name.startswith("result"):
        return n_layer
    return None


def model_components(info: GGUFInfo, role: str, ngl: int, s: Settings, gpus: list[Device], n_outputs: int) -> list[Component]:
    n_layer = info.n_layer or 0
    devs = _layer_devices(n_layer, ngl, gpus)
    repack = repack_types(s.cpu_features)
    weights: dict[str, int] = {}
    repacked = 0
    has_output = any(t.name == "output.weight" for t in info.tensors)
    for t in info.tensors:
        slot = _slot_of(t.name, n_layer)
        dev = "CPU" if slot is None or slot >= len(devs) else devs[slot]
        weights[dev] = weights.get(dev, 0) + t.n_bytes
        is_matmul = len(t.shape) == 2 and t.name.endswith(".weight") and not t.name.startswith("token_embd")
        if dev == "CPU" and is_matmul and t.type in repack and t.shape[1] % 8 == 0:
            repacked += t.n_bytes
        if t.name == "token_embd.weight" and not has_output and devs[n_layer] != "CPU":
            weights[devs[n_layer]] = weights.get(devs[n_layer], 0) + t.n_bytes  # tied output, copied to the GPU
    comps = [Component(role, "weights", d, b) for d, b in weights.items()]
    if repacked:
        comps.append(Component(role, "repacked weights", "CPU", repacked))
    kv: dict[str, int] = {}
    for il, b in enumerate(kv_bytes_per_layer(info, s)):
        kv[devs[il]] = kv.get(devs[il], 0) + b
    comps += [Component(role, "KV cache", d, b) for d, b in kv.items()]
    compute = compute_bytes(info, s)
    used = sorted(set(devs[:n_layer]) | {devs[n_layer]})
    for d in used:
        comps.append(Component(role, "compute", d, compute))
    if "CPU" not in used:  # inputs (token embeddings) are still gathered on the host
        comps.append(Component(role, "compute", "CPU", s.n_ubatch * (info.n_embd or 0) * 4))
    comps.append(Component(role, "output", "CPU", output_bytes(info, n_outputs)))
    return comps


def estimate(
    target: GGUFInfo,
    draft: GGUFInfo | None,
    devices: list[Device],
    settings: Settings,
    *,
    ngl_target: int = 0,
    ngl_draft: int = 0,
    margin: int = 0,
) -> Estimate:
    gpus = [d for d in devices if d.is_gpu]
    comps = model_components(target, "target", ngl_target, settings, gpus, settings.n_outputs_target)
    if draft is not None:
        comps += model_components(draft, "draft", ngl_draft, settings, gpus, 1)
    for g in gpus:
        if any(c.device == g.name for c in comps):
            backend = next((k for k in BACKEND_OVERHEAD if g.name.startswith(k)), None)
            comps.append(Component("both", "overhead", g.name, BACKEND_OVERHEAD.get(backend, DEFAULT_OVERHEAD)))
    return Estimate(comps, devices, margin, ngl_target, ngl_draft, settings)


def choose_offload(
    target: GGUFInfo,
    draft: GGUFInfo | None,
    devices: list[Device],
    settings: Settings,
    *,
    margin: int,
    ngl_target: int | None = None,
    ngl_draft: int | None = None,
) -> Estimate:
    """The largest offload that fits (``None`` = choose): the target's layers first, then the draft's."""
    if not any(d.is_gpu for d in devices):
        return estimate(target, draft, devices, settings, ngl_target=0, ngl_draft=0, margin=margin)

    def gpu_fits(est: Estimate) -> bool:
        return all(est.short(d) == 0 for d in devices if d.is_gpu)

    t_slots = (target.n_layer or 0) + 1
    d_slots = ((draft.n_layer or 0) + 1) if draft else 0
    if ngl_target is None:
        ngl_target = 0
        for n in range(t_slots, -1, -1):
            if gpu_fits(estimate(target, draft, devices, settings, ngl_target=n, ngl_draft=0, margin=margin)):
                ngl_target = n
                break
    if ngl_draft is None:
        ngl_draft = 0
        for n in range(d_slots, -1, -1):
            est = estimate(target, draft, devices, settings, ngl_target=ngl_target, ngl_draft=n, margin=margin)
            if gpu_fits(est):
                ngl_draft = n
                break
    return estimate(target, draft, devices, settings, ngl_target=ngl_target, ngl_draft=ngl_draft, margin=margin)


def suggestions(est: Estimate) -> list[str]:
    """What would make a setup that does not fit, fit: the changes users can make with flags."""
    settings, tips = est.settings, []
    kv = sum(c.bytes for c in est.components if c.what == "KV cache")
    if settings.n_ctx > 2048:
        tips.append(f"a smaller context, --ctx {max(2048, settings.n_ctx // 2)} (saves about {kv / 2 / GiB:.2f} GiB of KV cache)")
    if settings.cache_type_k == "f16" or settings.cache_type_v == "f16":
        tips.append(f"a quantized KV cache, --cache-type-k q8_0 --cache-type-v q8_0 (saves about {kv * 0.47 / GiB:.2f} GiB)")
    if any(d.is_gpu for d in est.devices) and est.ngl_target != 0:
        tips.append("fewer GPU layers, -ngl N (or leave -ngl at auto)")
    dsum = sum(c.bytes for c in est.components if c.model == "draft")
    if dsum:
        tips.append(f"no draft, --no-draft (frees {dsum / GiB:.2f} GiB)")
    return tips


# --- the entry point `budget` and `run` share -------------------------------------------------


def parse_layers(text: str | None, flag: str) -> int | None:
    """``-ngl`` values: "auto" (None: choose what fits), "all" (-1), or a layer count."""
    from .errors import UsageError

    if text is None or text == "auto":
        return None
    if text == "all":
        return -1
    try:
        n = int(text)
    except ValueError:
        n = -2
    if n < -1:
        raise UsageError(f"invalid value for {flag}: {text!r}", hint="use auto, all, or a number of layers (0 = CPU only)")
    return n


def plan(
    target: GGUFInfo,
    draft: GGUFInfo | None,
    *,
    n_ctx: int,
    n_ubatch: int = 512,
    cache_type_k: str = "f16",
    cache_type_v: str = "f16",
    flash_attn: str = "auto",
    draft_max: int = 4,
    ngl_target: int | None = None,
    ngl_draft: int | None = None,
    margin_gib: float = 1.0,
    devices: list[Device] | None = None,
) -> Estimate:
    """The memory plan of a run: probe devices (unless given), then fix or choose the offload."""
    from .devices import cpu_features, probe_devices

    devices = probe_devices() if devices is None else devices
    settings = Settings(
        n_ctx=n_ctx,
        n_ubatch=n_ubatch,
        cache_type_k=cache_type_k,
        cache_type_v=cache_type_v,
        flash_attn=flash_attn != "off",
        n_outputs_target=draft_max + 1 if draft is not None else 1,
        cpu_features=cpu_features(),
    )
    return choose_offload(
        target, draft, devices, settings,
        margin=int(margin_gib * GiB), ngl_target=ngl_target, ngl_draft=ngl_draft,
    )
