"""The memory check ``budget`` and ``run`` share: probe the devices, then fix or choose the offload.

What a setup needs is :mod:`.needs` (weights, KV cache, recurrent state, compute), where it goes
is :mod:`.placement`; this module turns a command's options into their one estimate.
"""

from __future__ import annotations

from ..models.meta import GGUFInfo
from .devices import Device
from .needs import GiB, Settings
from .placement import Estimate, choose_offload


def parse_layers(text: str | None, flag: str) -> int | None:
    """``-ngl`` values: "auto" (None: choose what fits), "all" (-1), or a layer count."""
    from ..errors import UsageError

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
    n_seq: int = 1,
) -> Estimate:
    """The memory plan of a run: probe devices (unless given), then fix or choose the offload.

    ``method``: what drafts (a Method value or "auto"; None: the draft model when ``draft`` is
    given, else the target runs alone). With ``draft_max`` it sizes the target's output rows, the
    recurrent-state snapshots, the checkpoints and, for "mtp", the MTP layers and context.
    ``mtp``: the target's MTP layers are loaded although ``method`` is not "mtp" (auto drafting
    with them: what the engine's ``mtp`` says); None = only for method "mtp". ``n_seq``: sequences
    decoded at once, each with ``n_ctx`` positions of one unified KV cache (and of the draft's)."""
    from .devices import cpu_features, probe_devices

    devices = probe_devices() if devices is None else devices
    drafting = bool(method or draft is not None)
    settings = Settings(
        n_ctx=n_ctx * n_seq,
        n_seq=n_seq,
        n_ubatch=n_ubatch,
        cache_type_k=cache_type_k,
        cache_type_v=cache_type_v,
        flash_attn=flash_attn != "off",
        n_outputs_target=min(n_ubatch, n_seq * (draft_max + 1)) if drafting else n_seq,
        cpu_features=cpu_features(),
        method=method,
        draft_max=draft_max,
        mtp=mtp,
    )
    return choose_offload(
        target, draft, devices, settings,
        margin=int(margin_gib * GiB), ngl_target=ngl_target, ngl_draft=ngl_draft,
    )
