"""One plan per run: the files, the drafting method and the draft settings, each with its source.

``run``, ``bench`` and ``export`` all build their plan here, so the order of precedence is
written once: a flag, then what ``bench --save`` stored for the pair on this machine, then the
registry entry, then specdec's default. The plan is frozen: a command reads it and never edits it,
and every value says where it came from (for the notes on stderr and for ``export``'s comments).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from ..errors import SpecdecError, UsageError
from ..models.meta import GGUFInfo, read_gguf
from ..models.methods import Method, forced_method
from .draft_choice import DraftChoice, find_draft, vet
from .local import resolve_local
from .registry import PairEntry, Registry

T = TypeVar("T")

AUTO = "auto"  # the method run uses unless told otherwise: per step, n-gram lookup, the draft model or none
_FILELESS = tuple(m for m in Method if not m.needs_draft_file)  # n-gram lookup, MTP


@dataclass(frozen=True)
class Setting(Generic[T]):
    """A value and where it came from: flag, bench, registry, default, auto, or how a file was found."""

    value: T
    source: str


@dataclass(frozen=True)
class ModelChoice:
    """The models a command was asked for: a pair, files or references, and a quant."""

    pair: str | None = None
    target: str | None = None
    draft: str | None = None
    quant: str | None = None


@dataclass(frozen=True)
class DraftFlags:
    """Draft settings given on the command line (None: not given)."""

    draft_max: int | None = None
    draft_min: int | None = None
    p_min: float | None = None


@dataclass(frozen=True)
class RunPlan:
    """What a command runs. ``target``/``draft`` are local paths, or repository names when the plan was
    made from the registry alone for a server elsewhere (``local`` False, no GGUF metadata then)."""

    target: Setting[Path | str]
    target_info: GGUFInfo | None
    draft: Setting[Path | str | None]
    draft_info: GGUFInfo | None
    drafter: Method | None  # what the draft is (NGRAM for an n-gram pair); None: the target alone
    method: Setting[str | None]  # what `run` runs: auto, one method, or None (the target alone)
    draft_max: Setting[int]
    draft_min: Setting[int]
    p_min: Setting[float]
    entry: PairEntry | None = None
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    local: bool = True

    @property
    def is_auto(self) -> bool:
        return self.method.value == AUTO


Confirm = Callable[[list], bool] | None


def build_plan(
    registry: Registry,
    models: ModelChoice,
    *,
    flags: DraftFlags = DraftFlags(),
    method: str | None = None,
    no_draft: bool = False,
    auto: bool = True,
    follow_bench: bool = True,
    fetch: bool = True,
    confirm: Confirm = None,
) -> RunPlan:
    """The plan for ``models``.

    ``method`` forces a drafting method (``--method``; None or "auto" lets the plan choose);
    ``auto`` False plans the draft's own method (a server has no auto); ``follow_bench`` lets a
    stored ``bench --save`` verdict drop a draft model that measured slower than none; ``fetch``
    downloads what is missing (asking ``confirm``), else a missing pair file is an error.
    """
    forced = forced_method(method)
    if forced in _FILELESS and (models.draft or no_draft):
        what = "without a draft model" if forced is Method.NGRAM else "with the target's own MTP layers"
        raise UsageError(f"--method {forced} drafts {what}", hint="drop --draft/--no-draft")
    if no_draft and models.draft:
        raise UsageError("--draft and --no-draft contradict each other", hint="pass one of them")
    skip = no_draft or forced in _FILELESS
    entry = registry.get(models.pair) if models.pair else None
    target, target_src, draft = _files(entry, models, skip, fetch, confirm)
    target_info = read_gguf(target)
    choice = _choose_draft(registry, entry, models, target, target_info, draft, skip, forced)
    if forced is Method.NGRAM:
        choice = DraftChoice(None, None, Method.NGRAM, "--method ngram")
    elif forced is Method.MTP:
        choice = DraftChoice(None, None, Method.MTP, "--method mtp", entry)
    if choice.method is Method.MTP:
        _check_mtp(target, target_info, choice.how)
    elif forced and not no_draft and choice.method != forced:
        article = "a draft model" if forced is Method.DRAFT else f"{'an' if forced[0] in 'aeiou' else 'a'} {forced} draft head"
        raise UsageError(f"--method {forced} needs {article}, and none was given or found",
                         hint=f"pass --draft FILE.gguf or --pair NAME (specdec pairs --method {forced} lists them)")

    settings, verdict = _settings(flags, _tuned(target, choice.path), choice.entry)
    notes: list[str] = []
    draft, info, drafter = Setting(choice.path, choice.how), choice.info, choice.method
    run_method = Setting(choice.method and choice.method.value, choice.how)
    if follow_bench and verdict in ("slower", "ngram") and not forced:
        notes.append(f"`specdec bench --save` found the draft model {choice.path.name} slower than going without it "
                     "on this machine: auto drafts from the text alone")
        draft, info, drafter, run_method = Setting(None, "bench"), None, None, Setting(AUTO, "bench")
    if forced and run_method.value is not None:
        run_method = Setting(forced.value, "flag")
    elif auto and not no_draft and run_method.value in (None, Method.DRAFT, Method.MTP, AUTO):
        run_method = Setting(AUTO, run_method.source if run_method.value == AUTO else "default")
        if flags.draft_max is None:
            from ..engine.decode.engine import AUTO_DRAFT_MAX

            settings["draft_max"] = Setting(AUTO_DRAFT_MAX, "bench" if verdict == "auto" else "auto")
    return RunPlan(
        target=Setting(target, target_src), target_info=target_info, draft=draft, draft_info=info, drafter=drafter,
        method=run_method, entry=choice.entry, warnings=choice.warnings, notes=tuple(notes), **settings,
    )


def plan_from_registry(entry: PairEntry, models: ModelChoice, flags: DraftFlags = DraftFlags()) -> RunPlan:
    """A plan for a pair that is not on this machine, by repository: for a server elsewhere."""
    target = models.target or entry.target_path or (entry.target_repos[0] if entry.target_repos else None)
    if target is None:
        raise SpecdecError(f"pair '{entry.name}' names no target", hint="pass --target")
    draft = None if entry.method in _FILELESS else (models.draft or entry.draft_path or entry.draft_repo)
    settings, _ = _settings(flags, None, entry)
    how = f"pair {entry.name}"
    return RunPlan(
        target=Setting(target, how), target_info=None, draft=Setting(draft, how), draft_info=None,
        drafter=Method(entry.method), method=Setting(entry.method, how), entry=entry, local=False, **settings,
    )


def _files(entry: PairEntry | None, models: ModelChoice, skip_draft: bool, fetch: bool,
           confirm: Confirm) -> tuple[Path, str, Path | None]:
    """(target, where it came from, draft or None) as local paths; downloads what is missing when ``fetch``."""
    if entry is None and not models.target:
        raise UsageError("no model given", hint="pass --pair NAME, or --target FILE.gguf [--draft FILE.gguf]")
    given = [_local(x, fetch, confirm) for x in (models.target, models.draft)]
    target, draft = given
    if entry is not None:
        roles = [r for r, have in (("target", target), ("draft", draft)) if have is None]
        if skip_draft or entry.method in _FILELESS:
            roles = [r for r in roles if r != "draft"]
        if roles:
            found = _pull(entry, models.quant, roles, confirm) if fetch else _on_disk(entry, models.quant, roles)
            target, draft = target or found[0], draft or found[1]
    return target, "--target" if models.target else f"pair {entry.name}", draft


def _local(text: str | None, fetch: bool, confirm: Confirm) -> Path | None:
    """A --target/--draft value as a path: references are downloaded (or found in the cache) when ``fetch``."""
    if not text:
        return None
    if not fetch:
        return Path(text)
    from .. import hub

    return Path(hub.resolve_model_arg(text, confirm=confirm))


def _pull(entry: PairEntry, quant: str | None, roles: list[str], confirm: Confirm) -> tuple[Path | None, Path | None]:
    from .pulls import pull

    pulled = pull(entry, quant, confirm=confirm, roles=roles)
    return pulled.target, pulled.draft


def _on_disk(entry: PairEntry, quant: str | None, roles: list[str]) -> tuple[Path | None, Path | None]:
    """The pair's files already on this machine; an error naming what is missing and how to get it."""
    from ..hub import pull_command

    files = resolve_local(entry, quant)
    missing = [m for m in files.missing if m.startswith(tuple(roles))]
    if missing:
        raise SpecdecError(
            f"pair '{entry.name}' is not on this machine: missing {'; '.join(missing)}",
            hint=f"run `{pull_command(entry.name, quant)}`, set target_path/draft_path in your pairs.toml, "
            "or pass --target/--draft",
        )
    return files.target, files.draft


def _choose_draft(registry: Registry, entry: PairEntry | None, models: ModelChoice, target: Path,
                  target_info: GGUFInfo, draft: Path | None, skip: bool, forced: Method | None) -> DraftChoice:
    if skip:
        return DraftChoice(None, None, None, "--no-draft")
    if entry is not None and entry.method in _FILELESS:
        return DraftChoice(None, None, Method(entry.method), f"pair {entry.name}", entry)
    if draft is None and forced is None and target_info.spec_info.get("mtp"):
        # the target drafts for itself: nothing to find, download or pair
        return DraftChoice(None, None, Method.MTP, "found in the target")
    if draft is None:
        return find_draft(registry, target, target_info, forced)
    how = f"pair {entry.name}" if entry is not None and not models.draft else "--draft"
    return vet(target, target_info, draft, entry, how, forced)


def _check_mtp(target: Path, info: GGUFInfo, how: str) -> None:
    """MTP needs nextn layers in the target GGUF itself (converters can leave them out)."""
    if not info.spec_info.get("mtp"):
        raise UsageError(
            f"{target.name} has no MTP (nextn) layers, which {how} drafts with",
            hint="use a GGUF converted with its MTP layers (llama.cpp's converter keeps them unless --no-mtp), "
                 "or --method ngram / a draft model",
        )


def _tuned(target: Path, draft: Path | None):
    """What ``bench --save`` stored for this pair on this machine (None when nothing, or no draft)."""
    if draft is None:
        return None
    from ..terminal import console
    from .tuned import load_tuned

    return load_tuned(target, draft, console.warn)


def _settings(flags: DraftFlags, tuned, entry: PairEntry | None) -> tuple[dict[str, Setting], str | None]:
    """Each draft setting from the first layer that sets it: flag, bench, registry, default.

    The second value is the stored measurement's verdict when no flag overrides it: "slower" (the
    draft model measured slower than none), "ngram" (n-gram drafting won), "auto", or None.
    """
    from ..engine.decode.engine import DraftOptions

    given = {"draft_max": flags.draft_max, "draft_min": flags.draft_min, "p_min": flags.p_min}
    d = DraftOptions()
    layers = [
        ("flag", given),
        ("bench", {"draft_max": tuned.draft_max, "p_min": tuned.p_min} if tuned and tuned.use_draft else {}),
        ("registry", {"draft_max": entry.draft_max, "draft_min": entry.draft_min, "p_min": entry.draft_p_min} if entry else {}),
        ("default", {"draft_max": d.draft_max, "draft_min": d.draft_min, "p_min": d.p_min}),
    ]
    settings = {name: next(Setting(layer[name], src) for src, layer in layers if layer.get(name) is not None)
                for name in given}
    verdict = None
    if tuned is not None and all(v is None for v in given.values()):
        verdict = "slower" if not tuned.use_draft else (tuned.method if tuned.method in (Method.NGRAM, AUTO) else None)
    return settings, verdict
