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
- **KV cache**, per attention layer ``n_ctx x (n_embd_k_gqa + n_embd_v_gqa)`` at the cache
  type's size, on the layer's device. Sliding-window layers keep ``n_swa + n_ubatch`` cells
  padded to 256 (``llama-kv-cache-iswa.cpp``), as specdec's contexts and llama.cpp's own tools
  create them, or ``n_ctx`` with ``Settings.swa_full`` (the library's default);
- **recurrent state** (recurrent layers of Mamba/RWKV and hybrid models,
  ``llama-memory-recurrent.cpp``): per recurrent layer ``(n_embd_r + n_embd_s) x 4`` bytes (f32)
  per row, one row per sequence, on the layer's device, whatever ``n_ctx``;
- **snapshots**: a drafting target of an architecture with bounded rollback (``SNAPSHOT_ARCHS``)
  gets ``n_rs_seq = snapshots_for(draft_max)`` more rows of that state (``1 + n_rs_seq`` rows);
- **checkpoint**: where a rejected draft is undone by copying the state back (a recurrent or
  hybrid draft model, or a target without snapshots), one copy of the recurrent state in host
  memory (``llama_state_seq_get_data_ext(..., PARTIAL_ONLY)``);
- **MTP** (``method`` mtp): the nextn layers' weights, which llama.cpp loads only then
  (otherwise they are not counted), and a second context over them: a KV cache of the nextn
  layers x ``n_ctx``, its compute buffer and a one-row output;
- **compute buffers**, from a fit to llama.cpp's own logged sizes (see ``compute_bytes``);
- **the output buffer**, ``n_outputs x n_vocab`` floats on the host;
- **a fixed overhead** per GPU backend (driver context, library workspaces).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from .devices import Device
from .gguf_meta import GGUFInfo
from .memory_kinds import (
    SNAPSHOT_ARCHS,
    MemoryKind,
    Rollback,
    draft_rollback,
    rollback_for,
    snapshots_for,
)

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

RS_BYTES = 4  # llama.cpp keeps recurrent states in f32 (GGML_TYPE_F32 in create_memory)


def repack_types(features: set[str]) -> set[str]:
    from .engine.llama import KEEP_EXTRA_BUFFERS

    if "AMX_INT8" in features and os.environ.get(KEEP_EXTRA_BUFFERS) != "1":
        return set()  # the engine loads without extra buffer types there (engine/llama.py says why)
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
    # What drafts: a Method value, "auto", or None = a draft model when one is given, else nothing
    # (the target alone). It decides the snapshots, the checkpoints and the MTP context.
    method: str | None = None
    draft_max: int = 4  # longest draft: the snapshots a target with bounded rollback gets
    # the target's MTP layers are loaded (as the engine's ``mtp``): None = when method is "mtp"
    mtp: bool | None = None
    # sliding-window layers get n_ctx cells (llama.cpp's library default); specdec's contexts,
    # like llama.cpp's tools, turn it off: n_swa + n_ubatch cells
    swa_full: bool = False


def drafting_method(settings: Settings, draft: GGUFInfo | None) -> str | None:
    """The method that drafts for this setup, None when the target runs alone."""
    if settings.method is not None:
        return settings.method
    return "draft" if draft is not None else None


def loads_mtp(target: GGUFInfo, settings: Settings, draft: GGUFInfo | None = None) -> bool:
    """The target's nextn layers are loaded and an MTP context made, as the engine decides it
    (``mtp`` asked for, or method "mtp", and no draft file), where the file has them."""
    wanted = settings.mtp if settings.mtp is not None else drafting_method(settings, draft) == "mtp"
    return bool(wanted) and draft is None and target.n_nextn > 0 and target.n_layer_trunk < (target.n_layer or 0)


def target_snapshots(target: GGUFInfo, settings: Settings, draft: GGUFInfo | None = None) -> int:
    """The ``n_rs_seq`` the target context gets: ``snapshots_for(draft_max)`` when something drafts
    and llama.cpp can roll the architecture back that way, else 0 (llama.cpp clamps it to 0)."""
    if drafting_method(settings, draft) is None or target.arch not in SNAPSHOT_ARCHS:
        return 0
    if target.memory not in (MemoryKind.RECURRENT, MemoryKind.HYBRID):
        return 0
    return snapshots_for(settings.draft_max)


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
    n_rs_seq: int = 0  # snapshots the target context gets
    method: str | None = None  # what drafts (drafting_method), None: the target alone
    rollback: dict = field(default_factory=dict)  # "target"/"draft" -> Rollback value, when something drafts

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
            "method": self.method,
            "draft_max": self.settings.draft_max,
            "n_rs_seq": self.n_rs_seq,
            "rollback": dict(self.rollback),
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


def _int_key(info: GGUFInfo, key: str, default: int = 0) -> int:
    v = _arch_key(info, key)
    if isinstance(v, list):
        v = v[0] if v else None
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else default


def _layer_kv_bytes(info: GGUFInfo, il: int, n_cells: int, s: Settings) -> int:
    """KV bytes of attention layer ``il`` over ``n_cells`` cells."""
    n_layer = max(il + 1, info.n_layer or 0)
    n_head = _per_layer(_arch_key(info, "attention.head_count"), n_layer, 1)
    n_head_kv = _per_layer(_arch_key(info, "attention.head_count_kv"), n_layer, None)
    heads = n_head[il] if isinstance(n_head[il], int) else 1
    heads_kv = n_head_kv[il] if isinstance(n_head_kv[il], int) else heads
    head_dim = (info.n_embd or 0) // max(1, heads)
    k_dim = (_int_key(info, "attention.key_length") or head_dim) * heads_kv
    v_dim = (_int_key(info, "attention.value_length") or head_dim) * heads_kv
    k_size, v_size = CACHE_TYPE_BYTES[s.cache_type_k], CACHE_TYPE_BYTES[s.cache_type_v]
    return int(n_cells * (k_dim * k_size + v_dim * v_size))


def swa_cells(info: GGUFInfo, s: Settings) -> int:
    """Cells of a sliding-window layer: n_ctx with swa_full (llama.cpp's library default), else
    min(n_ctx, n_swa + n_ubatch) padded to 256 (llama_kv_cache_iswa)."""
    cells = kv_cells(s.n_ctx)
    return cells if s.swa_full else min(cells, kv_cells(info.n_swa + s.n_ubatch))


def kv_bytes_per_layer(info: GGUFInfo, s: Settings) -> list[int]:
    """KV cache bytes of each of the ``block_count`` layers in an ordinary context, as llama.cpp
    allocates them: attention layers only (recurrent layers keep a state instead, see
    ``recurrent_bytes_per_layer``; nextn/MTP layers have their cache in the MTP context)."""
    n_layer = info.n_layer or 0
    cells = kv_cells(s.n_ctx)
    swa = set(info.swa_layers)
    out = [0] * n_layer
    for il in info.kv_layers:
        if il < n_layer:
            out[il] = _layer_kv_bytes(info, il, swa_cells(info, s) if il in swa else cells, s)
    return out


def recurrent_row_bytes(info: GGUFInfo) -> int:
    """One row of one recurrent layer's state: ``(n_embd_r + n_embd_s) x 4`` bytes, as
    ``llama_hparams::n_embd_r``/``n_embd_s`` size it: RWKV (token shift + wkv state), LFM2 (short
    convolution), Kimi KDA, MiniMax lightning attention, else Mamba/Mamba-2 and the gated
    delta-net of Qwen3-Next/3.5 (``ssm.*`` keys: conv ``(d_conv - 1) x (d_inner + 2 n_group
    d_state)`` + state ``d_state x d_inner``)."""
    n_embd = info.n_embd or 0
    n_head = _int_key(info, "attention.head_count", 1)
    wkv = _int_key(info, "wkv.head_size")
    l_cache = _int_key(info, "shortconv.l_cache")
    kda = _int_key(info, "kda.head_dim")
    d_conv = _int_key(info, "ssm.conv_kernel")
    d_inner = _int_key(info, "ssm.inner_size")
    d_state = _int_key(info, "ssm.state_size")
    n_group = _int_key(info, "ssm.group_count")
    if wkv:
        r = _int_key(info, "token_shift_count", 2) * n_embd
    elif l_cache:
        r = n_embd * (l_cache - 1)
    elif kda:
        r = 3 * (d_conv - 1 if d_conv > 0 else 3) * n_head * kda
    else:
        r = max(0, d_conv - 1) * (d_inner + 2 * n_group * d_state)
    if wkv:
        state = n_embd * wkv
    elif kda:
        state = kda * kda * n_head
    elif info.arch == "minimax-01":
        head_dim = _int_key(info, "attention.key_length") or n_embd // max(1, n_head)
        state = head_dim * head_dim * n_head
    else:
        state = d_state * d_inner
    return int(RS_BYTES * (r + state))


def recurrent_bytes_per_layer(info: GGUFInfo, n_rs_seq: int = 0) -> list[int]:
    """Recurrent-state bytes of each of the ``block_count`` layers: ``1 + n_rs_seq`` rows on each
    recurrent layer (the "RS buffer" llama.cpp logs), 0 elsewhere."""
    out = [0] * (info.n_layer or 0)
    row = recurrent_row_bytes(info)
    for il in info.recurrent_layers:
        if il < len(out):
            out[il] = row * (1 + max(0, n_rs_seq))
    return out


def recurrent_state_bytes(info: GGUFInfo) -> int:
    """One copy of the whole recurrent state (every recurrent layer, one row): a checkpoint."""
    return recurrent_row_bytes(info) * len(info.recurrent_layers)


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


def _add(into: dict[str, int], dev: str, n: int) -> None:
    into[dev] = into.get(dev, 0) + n


def model_components(
    info: GGUFInfo,
    role: str,
    ngl: int,
    s: Settings,
    gpus: list[Device],
    n_outputs: int,
    *,
    n_rs_seq: int = 0,
    load_mtp: bool = False,
) -> list[Component]:
    """One model's buffers. ``n_rs_seq``: the snapshots its context gets; ``load_mtp``: its nextn
    (MTP) layers are loaded, which llama.cpp skips otherwise (their tensors are not counted then)."""
    n_layer = info.n_layer or 0
    trunk = info.n_layer_trunk if info.n_nextn else n_layer
    devs = _layer_devices(n_layer, ngl, gpus)
    repack = repack_types(s.cpu_features)
    weights: dict[str, int] = {}
    repacked = 0
    has_output = any(t.name == "output.weight" for t in info.tensors)
    for t in info.tensors:
        slot = _slot_of(t.name, n_layer)
        if slot is not None and trunk <= slot < n_layer and not load_mtp:
            continue  # a nextn (MTP) block: not loaded unless MTP drafts
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
        if b:
            _add(kv, devs[il], b)
    comps += [Component(role, "KV cache", d, b) for d, b in kv.items()]
    state: dict[str, int] = {}
    snaps: dict[str, int] = {}
    row = recurrent_row_bytes(info)
    for il in info.recurrent_layers:
        if il < n_layer:
            _add(state, devs[il], row)
            if n_rs_seq > 0:
                _add(snaps, devs[il], row * n_rs_seq)
    comps += [Component(role, "recurrent state", d, b) for d, b in state.items() if b]
    comps += [Component(role, "snapshots", d, b) for d, b in snaps.items() if b]
    compute = compute_bytes(info, s)
    used = sorted(set(devs[:n_layer]) | {devs[n_layer]})
    for d in used:
        comps.append(Component(role, "compute", d, compute))
    if "CPU" not in used:  # inputs (token embeddings) are still gathered on the host
        comps.append(Component(role, "compute", "CPU", s.n_ubatch * (info.n_embd or 0) * 4))
    comps.append(Component(role, "output", "CPU", output_bytes(info, n_outputs)))
    return comps


def mtp_components(info: GGUFInfo, ngl: int, s: Settings, gpus: list[Device]) -> list[Component]:
    """The MTP context on the target: a KV cache of the nextn layers only (``n_ctx`` cells, plain
    attention), its compute buffer where those layers and the output live, a one-row output and
    the target's hidden states it reads (one row per verified token)."""
    n_layer = info.n_layer or 0
    devs = _layer_devices(n_layer, ngl, gpus)
    cells = kv_cells(s.n_ctx)
    kv: dict[str, int] = {}
    for il in range(info.n_layer_trunk, n_layer):
        _add(kv, devs[il], _layer_kv_bytes(info, il, cells, s))
    comps = [Component("target", "MTP KV cache", d, b) for d, b in kv.items() if b]
    compute = compute_bytes(info, s)  # a fit for whole models: an upper bound for one block
    for d in sorted(set(devs[info.n_layer_trunk:n_layer]) | {devs[n_layer]}):
        comps.append(Component("target", "MTP compute", d, compute))
    hidden = 4 * (info.n_embd or 0) * s.n_outputs_target
    comps.append(Component("target", "MTP output", "CPU", output_bytes(info, 1) + hidden))
    return comps


def rollbacks(target: GGUFInfo, draft: GGUFInfo | None, settings: Settings) -> dict[str, Rollback]:
    """How each context of the setup takes a rejected draft back (empty when nothing drafts)."""
    method = drafting_method(settings, draft)
    if method is None:
        return {}
    out = {"target": rollback_for(target.arch, target.memory, snapshots=target_snapshots(target, settings, draft))}
    if draft is not None and method not in ("ngram", "mtp"):
        out["draft"] = draft_rollback(draft.arch, draft.memory)
    return out


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
    method = drafting_method(settings, draft)
    mtp = loads_mtp(target, settings, draft)
    n_rs_seq = target_snapshots(target, settings, draft)
    comps = model_components(target, "target", ngl_target, settings, gpus, settings.n_outputs_target,
                             n_rs_seq=n_rs_seq, load_mtp=mtp)
    if mtp:
        comps += mtp_components(target, ngl_target, settings, gpus)
    uses_draft = draft is not None and method not in ("ngram", "mtp")
    if uses_draft:
        comps += model_components(draft, "draft", ngl_draft, settings, gpus, 1)
    # a rollback by checkpoint keeps one copy of the recurrent state in host memory per context
    how_back = rollbacks(target, draft if uses_draft else None, settings)
    for role, how in how_back.items():
        info = target if role == "target" else draft
        if how is Rollback.CHECKPOINT and recurrent_state_bytes(info):
            comps.append(Component(role, "checkpoint", "CPU", recurrent_state_bytes(info)))
    for g in gpus:
        if any(c.device == g.name for c in comps):
            backend = next((k for k in BACKEND_OVERHEAD if g.name.startswith(k)), None)
            comps.append(Component("both", "overhead", g.name, BACKEND_OVERHEAD.get(backend, DEFAULT_OVERHEAD)))
    return Estimate(comps, devices, margin, ngl_target, ngl_draft, settings, n_rs_seq=n_rs_seq, method=method,
                    rollback={k: v.value for k, v in how_back.items()})


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
    snaps = sum(c.bytes for c in est.components if c.what == "snapshots")
    if snaps and est.n_rs_seq > 1:
        shorter = max(1, est.n_rs_seq // 2)
        tips.append(f"shorter drafts, --draft-max {shorter} (each token of draft keeps one more copy of the "
                    f"recurrent state: saves about {snaps * (est.n_rs_seq - shorter) / est.n_rs_seq / GiB:.2f} GiB)")
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
    method: str | None = None,
    mtp: bool | None = None,
) -> Estimate:
    """The memory plan of a run: probe devices (unless given), then fix or choose the offload.

    ``method``: what drafts (a Method value or "auto"; None: the draft model when ``draft`` is
    given, else the target runs alone). With ``draft_max`` it sizes the target's output rows, the
    recurrent-state snapshots, the checkpoints and, for "mtp", the MTP layers and context.
    ``mtp``: the target's MTP layers are loaded although ``method`` is not "mtp" (auto drafting
    with them: what the engine's ``mtp`` says); None = only for method "mtp"."""
    from .devices import cpu_features, probe_devices

    devices = probe_devices() if devices is None else devices
    settings = Settings(
        n_ctx=n_ctx,
        n_ubatch=n_ubatch,
        cache_type_k=cache_type_k,
        cache_type_v=cache_type_v,
        flash_attn=flash_attn != "off",
        n_outputs_target=draft_max + 1 if (method or draft is not None) else 1,
        cpu_features=cpu_features(),
        method=method,
        draft_max=draft_max,
        mtp=mtp,
    )
    return choose_offload(
        target, draft, devices, settings,
        margin=int(margin_gib * GiB), ngl_target=ngl_target, ngl_draft=ngl_draft,
    )
