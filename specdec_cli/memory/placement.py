"""Where a setup's memory goes: each model's buffers per device (llama.cpp's layer placement),
the estimate per device against its free memory, the largest offload that fits, and what to
change when nothing fits. The sizes themselves come from :mod:`.needs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..models.meta import GGUFInfo
from .devices import Device
from .needs import (
    BACKEND_OVERHEAD,
    DEFAULT_OVERHEAD,
    GiB,
    ModelNeeds,
    Settings,
    SetupNeeds,
    model_needs,
    setup_needs,
)


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
            "n_seq": self.settings.n_seq,
            "n_rs_seq": self.n_rs_seq,
            "rollback": dict(self.rollback),
            "components": [c.__dict__ for c in self.components],
            "devices": [
                {**d.to_dict(), "needed": self.used(d.name), "short": self.short(d)} for d in self.devices
            ],
        }


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


def _add(into: dict[str, int], dev: str, n: int) -> None:
    into[dev] = into.get(dev, 0) + n


def place(needs: ModelNeeds, ngl: int, gpus: list[Device]) -> list[Component]:
    """One model's buffers on the devices its ``ngl`` GPU layers give each slot."""
    role, n_layer = needs.role, needs.n_layer
    devs = _layer_devices(n_layer, ngl, gpus)
    weights: dict[str, int] = {}
    for slot, n in needs.weights.items():
        _add(weights, "CPU" if slot is None else devs[slot], n)
    if needs.tied_output and devs[n_layer] != "CPU":
        _add(weights, devs[n_layer], needs.tied_output)  # tied output, copied to the GPU
    comps = [Component(role, "weights", d, b) for d, b in weights.items()]
    repacked = sum(n for slot, n in needs.repackable_slots.items() if slot is None or devs[slot] == "CPU")
    if repacked:
        comps.append(Component(role, "repacked weights", "CPU", repacked))
    for what, per_layer in (("KV cache", needs.kv), ("recurrent state", needs.state), ("snapshots", needs.snapshots)):
        by_dev: dict[str, int] = {}
        for il, b in enumerate(per_layer):
            if b:
                _add(by_dev, devs[il], b)
        comps += [Component(role, what, d, b) for d, b in by_dev.items()]
    used = sorted(set(devs[:n_layer]) | {devs[n_layer]})
    for d in used:
        comps.append(Component(role, "compute", d, needs.compute))
    if "CPU" not in used:  # inputs (token embeddings) are still gathered on the host
        comps.append(Component(role, "compute", "CPU", needs.input_compute))
    comps.append(Component(role, "output", "CPU", needs.output))
    if needs.mtp_layers:
        comps += _place_mtp(needs, devs)
    if needs.checkpoint:
        comps.append(Component(role, "checkpoint", "CPU", needs.checkpoint))
    return comps


def _place_mtp(needs: ModelNeeds, devs: list[str]) -> list[Component]:
    """The MTP context on the target: a KV cache of the nextn layers only (``n_ctx`` cells, plain
    attention), its compute buffer where those layers and the output live, a one-row output and
    the target's hidden states it reads."""
    kv: dict[str, int] = {}
    for il, b in zip(needs.mtp_layers, needs.mtp_kv):
        _add(kv, devs[il], b)
    comps = [Component("target", "MTP KV cache", d, b) for d, b in kv.items() if b]
    # the compute fit is for whole models: an upper bound for one block
    for d in sorted({devs[il] for il in needs.mtp_layers} | {devs[needs.n_layer]}):
        comps.append(Component("target", "MTP compute", d, needs.compute))
    comps.append(Component("target", "MTP output", "CPU", needs.mtp_output))
    return comps


def mtp_components(info: GGUFInfo, ngl: int, s: Settings, gpus: list[Device]) -> list[Component]:
    """The MTP context's buffers alone, for a target whose nextn layers are loaded."""
    needs = model_needs(info, "target", s, s.n_outputs_target, load_mtp=True)
    return _place_mtp(needs, _layer_devices(needs.n_layer, ngl, gpus))


def placed(needs: SetupNeeds, devices: list[Device], settings: Settings, *, ngl_target: int = 0,
           ngl_draft: int = 0, margin: int = 0) -> Estimate:
    """The setup's buffers on ``devices`` with these offloads, and a fixed overhead per GPU used."""
    gpus = [d for d in devices if d.is_gpu]
    comps = place(needs.target, ngl_target, gpus)
    if needs.draft is not None:
        comps += place(needs.draft, ngl_draft, gpus)
    for g in gpus:
        if any(c.device == g.name for c in comps):
            backend = next((k for k in BACKEND_OVERHEAD if g.name.startswith(k)), None)
            comps.append(Component("both", "overhead", g.name, BACKEND_OVERHEAD.get(backend, DEFAULT_OVERHEAD)))
    return Estimate(comps, devices, margin, ngl_target, ngl_draft, settings, n_rs_seq=needs.n_rs_seq,
                    method=needs.method, rollback={k: v.value for k, v in needs.rollback.items()})


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
    return placed(setup_needs(target, draft, settings), devices, settings,
                  ngl_target=ngl_target, ngl_draft=ngl_draft, margin=margin)


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
    needs = setup_needs(target, draft, settings)
    if not any(d.is_gpu for d in devices):
        return placed(needs, devices, settings, margin=margin)

    def at(nt: int, nd: int) -> Estimate:
        return placed(needs, devices, settings, ngl_target=nt, ngl_draft=nd, margin=margin)

    def gpu_fits(est: Estimate) -> bool:
        return all(est.short(d) == 0 for d in devices if d.is_gpu)

    t_slots = needs.target.n_layer + 1
    d_slots = needs.draft.n_layer + 1 if needs.draft is not None else 0
    if ngl_target is None:
        ngl_target = next((n for n in range(t_slots, -1, -1) if gpu_fits(at(n, 0))), 0)
    if ngl_draft is None:
        ngl_draft = next((n for n in range(d_slots, -1, -1) if gpu_fits(at(ngl_target, n))), 0)
    return at(ngl_target, ngl_draft)


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


