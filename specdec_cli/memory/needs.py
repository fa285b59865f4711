"""What each model of a setup needs in memory, from GGUF metadata alone (no weights loaded).

Running out of memory is the commonest way a speculative setup fails: the draft needs
weights, a KV cache and compute buffers of its own. Per model:

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

Where each piece goes (the devices, the offload) is :mod:`.placement`'s job.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from ..models.memory_kinds import (
    SNAPSHOT_ARCHS,
    MemoryKind,
    Rollback,
    draft_rollback,
    rollback_for,
    snapshots_for,
)
from ..models.meta import GGUFInfo

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
    from ..engine.llama.library import KEEP_EXTRA_BUFFERS

    if "AMX_INT8" in features and os.environ.get(KEEP_EXTRA_BUFFERS) != "1":
        return set()  # the engine loads without extra buffer types there (engine/llama/library.py says why)
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
    n_ctx: int = 4096  # KV cells of a context: every sequence's positions together
    n_seq: int = 1  # sequences decoded at once
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


def layer_kv_bytes(info: GGUFInfo, il: int, n_cells: int, s: Settings) -> int:
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
            out[il] = layer_kv_bytes(info, il, swa_cells(info, s) if il in swa else cells, s)
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


def rollbacks(target: GGUFInfo, draft: GGUFInfo | None, settings: Settings) -> dict[str, Rollback]:
    """How each context of the setup takes a rejected draft back (empty when nothing drafts)."""
    method = drafting_method(settings, draft)
    if method is None:
        return {}
    out = {"target": rollback_for(target.arch, target.memory, snapshots=target_snapshots(target, settings, draft))}
    if draft is not None and method not in ("ngram", "mtp"):
        out["draft"] = draft_rollback(draft.arch, draft.memory)
    return out


# --- one model's needs, computed once and placed as often as the offload search asks ------------


@dataclass
class ModelNeeds:
    """What one model needs, by layer slot (0..n_layer-1 the layers, n_layer the output, None the
    host-only input); :mod:`.placement` puts each slot on a device. Computed once per model."""

    role: str  # "target" | "draft"
    n_layer: int
    weights: dict[int | None, int]  # slot -> bytes of the tensors loaded there
    repackable: int  # bytes of weights the CPU would repack (counted when their slot is on the CPU)
    repackable_slots: dict[int | None, int]
    tied_output: int  # the token embedding, copied to the output's device when there is no output.weight
    kv: list[int]  # per layer
    state: list[int]  # one row of recurrent state per layer
    snapshots: list[int]  # the recurrent-state snapshots per layer
    compute: int
    input_compute: int  # the host's share when every slot is on a GPU
    output: int
    mtp_layers: range = range(0)  # nextn layers with an MTP context (their KV cache, compute and output)
    mtp_kv: list[int] = field(default_factory=list)
    mtp_output: int = 0
    checkpoint: int = 0  # one copy of the recurrent state in host memory, where drafts are checkpointed


@dataclass
class SetupNeeds:
    """Every model of a setup: the target (with its MTP context), the draft, and how each takes a
    rejected draft back."""

    target: ModelNeeds
    draft: ModelNeeds | None
    n_rs_seq: int
    method: str | None
    rollback: dict[str, Rollback]


def _slot_of(name: str, n_layer: int) -> int | None:
    """Layer slot of a tensor: None = the input (host), n_layer = the output layer."""
    if name.startswith("blk."):
        return int(name.split(".")[1])
    if name.startswith("output") or name.startswith("result"):
        return n_layer
    return None


def model_needs(info: GGUFInfo, role: str, s: Settings, n_outputs: int, *, n_rs_seq: int = 0,
                load_mtp: bool = False, checkpoint: bool = False) -> ModelNeeds:
    """One model's needs. ``n_rs_seq``: the snapshots its context gets; ``load_mtp``: its nextn (MTP)
    layers are loaded and get an MTP context, which llama.cpp skips otherwise (their tensors are not
    counted then); ``checkpoint``: rejected drafts are undone by a copy of its recurrent state."""
    n_layer = info.n_layer or 0
    trunk = info.n_layer_trunk if info.n_nextn else n_layer
    repack = repack_types(s.cpu_features)
    weights: dict[int | None, int] = {}
    repackable: dict[int | None, int] = {}
    tied = 0
    has_output = any(t.name == "output.weight" for t in info.tensors)
    for t in info.tensors:
        slot = _slot_of(t.name, n_layer)
        if slot is not None and trunk <= slot < n_layer and not load_mtp:
            continue  # a nextn (MTP) block: not loaded unless MTP drafts
        slot = None if slot is not None and slot > n_layer else slot
        weights[slot] = weights.get(slot, 0) + t.n_bytes
        is_matmul = len(t.shape) == 2 and t.name.endswith(".weight") and not t.name.startswith("token_embd")
        if is_matmul and t.type in repack and t.shape[1] % 8 == 0:
            repackable[slot] = repackable.get(slot, 0) + t.n_bytes
        if t.name == "token_embd.weight" and not has_output:
            tied = t.n_bytes
    row = recurrent_row_bytes(info)
    state = [0] * n_layer
    snaps = [0] * n_layer
    for il in info.recurrent_layers:
        if il < n_layer:
            state[il] = row
            snaps[il] = row * max(0, n_rs_seq)
    needs = ModelNeeds(
        role=role, n_layer=n_layer, weights=weights, repackable=sum(repackable.values()),
        repackable_slots=repackable, tied_output=tied, kv=kv_bytes_per_layer(info, s), state=state,
        snapshots=snaps, compute=compute_bytes(info, s), input_compute=s.n_ubatch * (info.n_embd or 0) * 4,
        output=output_bytes(info, n_outputs),
        checkpoint=recurrent_state_bytes(info) if checkpoint else 0,
    )
    if load_mtp:
        cells = kv_cells(s.n_ctx)
        needs.mtp_layers = range(info.n_layer_trunk, n_layer)
        needs.mtp_kv = [layer_kv_bytes(info, il, cells, s) for il in needs.mtp_layers]
        # a one-row output, and the target's hidden states it reads (one row per verified token)
        needs.mtp_output = output_bytes(info, 1) + 4 * (info.n_embd or 0) * s.n_outputs_target
    return needs


def setup_needs(target: GGUFInfo, draft: GGUFInfo | None, settings: Settings) -> SetupNeeds:
    """The needs of a target (+ draft) setup, each GGUF's metadata read through once."""
    method = drafting_method(settings, draft)
    uses_draft = draft is not None and method not in ("ngram", "mtp")
    how_back = rollbacks(target, draft if uses_draft else None, settings)
    n_rs_seq = target_snapshots(target, settings, draft)
    t = model_needs(target, "target", settings, settings.n_outputs_target, n_rs_seq=n_rs_seq,
                    load_mtp=loads_mtp(target, settings, draft),
                    checkpoint=how_back.get("target") is Rollback.CHECKPOINT)
    d = None
    if uses_draft:
        d = model_needs(draft, "draft", settings, settings.n_seq, checkpoint=how_back.get("draft") is Rollback.CHECKPOINT)
    return SetupNeeds(t, d, n_rs_seq, method, how_back)
