"""Can this draft speed up this target? The pairing verdict, before anything loads.

Two kinds of rules. The vocabulary rules are hard and exactly llama.cpp's
(``common_speculative_are_compatible``): if they fail, llama.cpp refuses the
pair, so we say precisely what differs instead. The base/size rules are
specdec's own judgement: a draft larger than its target is a mistake; an
EAGLE-3 / DFlash / DSpark head is trained for one base model, so a different
family is an error and a different size a warning (acceptance collapses); a
classic draft from another family only earns a warning, the vocabulary decides.

Memory is said, not judged: a recurrent or hybrid side is rolled back by snapshots or by
checkpoint and restore (``memory_kinds``), which the "memory" line names; only a model with no
memory at all (encoder-only, embedding, diffusion architectures) is an error, on either side.
A target with MTP (nextn) layers can also be checked alone (``check_self``): it drafts for itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import UsageError
from ..models.memory_kinds import SNAPSHOT_CAP, MemoryKind, Rollback, draft_rollback, target_rollback
from ..models.meta import GGUFInfo
from ..models.methods import Method

__all__ = ["Check", "Verdict", "check_vocab", "check_base", "check_pair", "check_memory", "check_self"]

# llama.cpp common/speculative.cpp
VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5


@dataclass
class Check:
    name: str
    ok: bool
    detail: str

    def to_dict(self) -> dict:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass
class Verdict:
    ok: bool
    checks: list[Check] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "checks": [c.to_dict() for c in self.checks],
            "errors": list(self.errors),
            "warnings": list(self.warnings),
        }


def _show(text: str) -> str:
    """A token text for humans: quoted, invalid bytes and control characters escaped."""
    clean = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return repr(clean)


def _a(word: str) -> str:
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def _id(v: int | None) -> str:
    return "none" if v is None else str(v)


def vocab_matches(target: GGUFInfo, draft: GGUFInfo) -> bool:
    """``check_vocab``'s verdict, with the token texts (the dear part) compared only once the
    cheap rules agree: finding a draft reads every GGUF beside the target."""
    return all(c.ok for c in check_vocab(target, draft, texts=False)) and _check_tokens(target, draft).ok


def check_vocab(target: GGUFInfo, draft: GGUFInfo, *, texts: bool = True) -> list[Check]:
    """llama.cpp's vocabulary rules, one Check each, with what differed (``texts``: and the token
    texts compared one by one)."""
    checks: list[Check] = []
    t_type = target.vocab_type or target.vocab_model or "none"
    d_type = draft.vocab_type or draft.vocab_model or "none"
    checks.append(Check(
        "vocab type", t_type == d_type,
        f"both {t_type}" if t_type == d_type else f"vocab types differ: target {t_type}, draft {d_type}",
    ))

    checks.append(_special_check("bos", target.add_bos, target.bos_id, draft.add_bos, draft.bos_id))
    checks.append(_special_check("eos", target.add_eos, target.eos_id, draft.add_eos, draft.eos_id))

    nt, nd = target.n_vocab, draft.n_vocab
    diff = abs(nt - nd)
    if diff > VOCAB_MAX_SIZE_DIFFERENCE:
        checks.append(Check("vocab size", False,
                            f"vocab sizes {nt} vs {nd} differ by {diff} (max {VOCAB_MAX_SIZE_DIFFERENCE})"))
    else:
        checks.append(Check("vocab size", True,
                            f"{nt} tokens" if diff == 0 else f"{nt} vs {nd} tokens (within {VOCAB_MAX_SIZE_DIFFERENCE})"))

    if texts:
        checks.append(_check_tokens(target, draft))
    return checks


def _special_check(kind: str, t_add: bool, t_id: int | None, d_add: bool, d_id: int | None) -> Check:
    """BOS/EOS rule: same add_<kind> flag, and the same id when the token is added."""
    flag = f"add_{kind}"
    if t_add != d_add:
        return Check(kind, False, f"{flag} differs: target {str(t_add).lower()}, draft {str(d_add).lower()}")
    if t_add and t_id != d_id:
        return Check(kind, False, f"{kind.upper()} ids differ: target {_id(t_id)}, draft {_id(d_id)}")
    return Check(kind, True, f"{flag} {str(t_add).lower()}" + (f", {kind.upper()} id {_id(t_id)}" if t_add else ""))


def _check_tokens(target: GGUFInfo, draft: GGUFInfo) -> Check:
    raw = target.tokens_raw()
    if raw is not None and target.n_vocab == draft.n_vocab and raw == draft.tokens_raw():
        n = target.n_vocab
        if n > VOCAB_CHECK_START_TOKEN_ID:
            return Check("token texts", True, f"tokens {VOCAB_CHECK_START_TOKEN_ID}..{n - 1} identical")
    tt, dt = target.tokens(), draft.tokens()
    start, n = VOCAB_CHECK_START_TOKEN_ID, min(len(tt), len(dt))
    if n <= start:
        return Check("token texts", True, "nothing to compare")
    if tt[start:n] == dt[start:n]:
        return Check("token texts", True, f"tokens {start}..{n - 1} identical")
    i = next(i for i in range(start, n) if tt[i] != dt[i])
    return Check("token texts", False, f"token {i} differs: target {_show(tt[i])}, draft {_show(dt[i])}")


def _fmt_params(n: int) -> str:
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            v = n / div
            return (f"{v:.1f}".rstrip("0").rstrip(".") if v < 100 else f"{v:.0f}") + unit
    return str(n)


def _base(family: str | None, size: str | None) -> str:
    return " ".join(x for x in (family, size) if x) or "an unknown base"


def check_base(
    target: GGUFInfo,
    draft: GGUFInfo,
    *,
    method: str = "draft",
    entry_family: str | None = None,
    entry_size: str | None = None,
) -> tuple[list[str], list[str]]:
    """Base-model and size rules. Returns (errors, warnings).

    ``entry_family``/``entry_size`` describe the registry entry the draft came from
    (what it is meant for; "any" matches everything); they are compared with the
    target's family and scale.
    """
    if method not in Method.with_draft_file():
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(Method.with_draft_file())}")
    errors: list[str] = []
    warnings: list[str] = []
    t_fam, t_size = target.family, target.scale
    # "any" in a registry entry matches every family / size
    entry_family = entry_family.lower() if entry_family and entry_family.lower() != "any" else None
    entry_size = entry_size.lower() if entry_size and entry_size.lower() != "any" else None

    if method == "draft":
        if draft.n_params > target.n_params:
            errors.append(
                f"the draft ({_fmt_params(draft.n_params)} params) is larger than the target "
                f"({_fmt_params(target.n_params)} params): swap them?"
            )
        elif draft.n_params == target.n_params and draft.n_params:
            warnings.append("the draft is as large as the target: speculative decoding cannot speed it up")
        if entry_family or entry_size:
            fam_off = entry_family and t_fam and entry_family != t_fam
            size_off = entry_size and t_size and entry_size != t_size
            if fam_off or size_off:
                warnings.append(
                    f"this draft is registered for {_base(entry_family, entry_size)} "
                    f"but the target is {_base(t_fam, t_size)}"
                )
        elif draft.family and t_fam and draft.family != t_fam:
            warnings.append(
                f"the draft looks like {draft.family} but the target is {t_fam}: "
                "fine if the vocabularies match, but acceptance may be low"
            )
        return errors, warnings

    # eagle3 / dflash / dspark: a head trained on one base model's hidden states
    d_fam = entry_family or draft.family
    d_size = entry_size or draft.scale
    if not d_fam:
        warnings.append(f"cannot tell which base model this {method} draft was made for")
    elif t_fam and d_fam != t_fam:
        errors.append(f"{method} draft made for {_base(d_fam, d_size)}, target is {_base(t_fam, t_size)}")
    elif d_size and t_size and d_size != t_size:
        warnings.append(
            f"draft made for {d_fam} {d_size}, target is {t_fam} {t_size}: acceptance will collapse"
        )
    errors += _check_head_shape(target, draft, method)
    return errors, warnings


# The target architectures whose graph records its layer inputs in the llama.cpp that
# llama-cpp-python 0.3.36 vendors: the ``general.architecture`` names whose model class sets
# ``res->t_layer_inp[il]`` (src/models/*.cpp). A head on any other target aborts the process at
# its first decode (``GGML_ASSERT(t_layer_inp[il] != nullptr && "layer input tensor is null")``,
# src/llama-graph.cpp), Qwen2 and Qwen2.5 among them. Read again when the pin moves.
HEAD_FED_ARCHS = frozenset({
    "bailingmoe3", "deepseek4", "gemma4", "gpt-oss", "hunyuan_vl", "lfm2", "llama", "mimo2", "minimax-01",
    "minimax-m2", "muse-glimmer", "nanbeige", "nemotron_h", "qwen3", "qwen35", "qwen35moe", "qwen3moe",
    "qwen3next", "qwen4exp",
})


def _check_head_shape(target: GGUFInfo, draft: GGUFInfo, method: str) -> list[str]:
    """The head reads the target's hidden states: llama.cpp must record them for the target's
    architecture, and the head's recorded width and layer ids must fit."""
    errors: list[str] = []
    if target.arch and target.arch not in HEAD_FED_ARCHS:
        errors.append(f"llama.cpp records no hidden states for {target.arch} targets, which {_a(method)} "
                      f"draft head reads (it would abort at the first pass); use auto drafting or a draft model")
    info = draft.spec_info or {}
    layers = info.get("target_layers")
    if method == "eagle3" and layers is not None and len(layers) != 3:
        errors.append(f"an eagle3 draft needs exactly 3 target layers, this one records {len(layers)}")
    # dflash/dspark feed target states of the draft's own width
    width = info.get("target_hidden_size") if method == "eagle3" else info.get("target_hidden_size") or draft.n_embd
    if width and target.n_embd and width != target.n_embd:
        errors.append(f"the {method} draft expects target hidden size {width}, the target has {target.n_embd}")
    if layers and target.n_layer is not None:
        # llama.cpp extracts layer inputs 0..n_layer-1; EAGLE-3 may also read n_layer (the final state)
        top = target.n_layer if method == "eagle3" else target.n_layer - 1
        bad = [i for i in layers if i > top]
        if bad:
            errors.append(
                f"the {method} draft reads target layers {list(layers)}, "
                f"but the target has only {target.n_layer} layers"
            )
    return errors


def check_pair(
    target: GGUFInfo,
    draft: GGUFInfo,
    *,
    method: str | None = None,
    entry_family: str | None = None,
    entry_size: str | None = None,
) -> Verdict:
    """Full verdict: vocabulary checks, method/base/size rules. ``method`` defaults
    to what the draft GGUF is (eagle3/dflash/dspark head) or classic "draft"."""
    method = method or draft.spec_method or "draft"
    if method not in Method.with_draft_file():
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(Method.with_draft_file())}")
    errors: list[str] = []
    warnings: list[str] = []
    checks: list[Check] = []

    if target.spec_method:
        errors.append(f"the target is {_a(target.spec_method)} draft head, not a model: "
                      "pass the base model as target")
    if method != "draft" and draft.spec_method != method:
        what = f"{_a(draft.spec_method)} draft" if draft.spec_method else "a plain model"
        errors.append(f"method {method} needs {_a(method)} draft, but {draft.path.name} is {what}")
    elif method == "draft" and draft.spec_method:
        errors.append(f"{draft.path.name} is {_a(draft.spec_method)} draft head: use method {draft.spec_method}")
    checks.append(Check("method", not errors, errors[-1] if errors else
                        "classic draft model" if method == "draft" else f"{method} draft head"))

    if method in Method.heads() and draft.vocab_type is None:
        checks.append(Check("vocab", True, "the draft has no vocabulary of its own: it uses the target's"))
    else:
        vocab = check_vocab(target, draft)
        checks += vocab
        errors += [f"vocabulary: {c.detail}" for c in vocab if not c.ok]

    b_errors, b_warnings = check_base(target, draft, method=method,
                                      entry_family=entry_family, entry_size=entry_size)
    checks.append(Check("base", not b_errors, "; ".join(b_errors) or _base_summary(target, draft, method)))
    errors += b_errors
    memory = check_memory(target, draft, method=method)
    checks.append(memory)
    if not memory.ok:
        errors.append(memory.detail)
    warnings += b_warnings
    return Verdict(ok=not errors and all(c.ok for c in checks), checks=checks,
                   errors=errors, warnings=warnings)


def _base_summary(target: GGUFInfo, draft: GGUFInfo, method: str) -> str:
    if method == "draft":
        return (f"draft {_fmt_params(draft.n_params)} params, "
                f"target {_fmt_params(target.n_params)} params")
    return f"{method} draft for {_base(draft.family, draft.scale)}, target {_base(target.family, target.scale)}"


# --- memory: how rejected drafts are taken back -----------------------------------------------

_HOW = {
    Rollback.PARTIAL: "rolled back by dropping cache positions",
    Rollback.SNAPSHOTS: f"rolled back with recurrent-state snapshots (drafts capped at {SNAPSHOT_CAP} tokens)",
    Rollback.CHECKPOINT: "rolled back by checkpoint and restore",
}


def _no_memory(role: str, info: GGUFInfo) -> str:
    return (f"the {role} ({info.arch}) keeps no memory between tokens (an encoder-only, embedding or "
            f"diffusion architecture): it cannot {'verify' if role == 'target' else 'propose'} drafts")


def _side(role: str, info: GGUFInfo, how: Rollback) -> str:
    return f"{role} {info.memory}, {_HOW[how]}"


def check_memory(target: GGUFInfo, draft: GGUFInfo | None = None, *, method: str = "draft") -> Check:
    """The "memory" line: each side's memory kind and how a rejected draft leaves it. Not ok when
    a side has no memory at all (nothing to roll back, nothing to generate with), or when a draft
    head would read the hidden states of a target that can only be checkpointed (the engine
    refuses that: the states are not kept in step across a restore)."""
    for role, info in (("target", target), ("draft", draft)):
        if info is not None and info.memory is MemoryKind.NONE:
            return Check("memory", False, _no_memory(role, info))
    t_how = target_rollback(target.arch, target.memory)
    if draft is not None and method in Method.heads() and t_how is Rollback.CHECKPOINT:
        return Check("memory", False,
                     f"{_a(method)} draft head reads the target's hidden states, which specdec does not keep in "
                     f"step across a checkpoint restore of its {target.memory} memory: use a draft model, "
                     "ngram or mtp with this target")
    if draft is None:
        return Check("memory", True, _side("target", target, t_how))
    d_how = draft_rollback(draft.arch, draft.memory)
    if t_how is d_how and target.memory is draft.memory:
        return Check("memory", True, f"target and draft {target.memory}, both {_HOW[t_how]}")
    return Check("memory", True, f"{_side('target', target, t_how)}; {_side('draft', draft, d_how)}")


def check_self(target: GGUFInfo) -> Verdict:
    """``check --target T`` without a draft: T drafts for itself with its MTP (nextn) layers.
    Raises UsageError when it has none (a draft is needed then)."""
    if not target.has_mtp:
        raise UsageError(f"{target.path.name} has no MTP (nextn) layers to draft with: pass --draft",
                         hint="check a draft against it with --draft FILE.gguf; `specdec run --method ngram` "
                              "needs no draft at all")
    errors: list[str] = []
    if target.spec_method:
        errors.append(f"the target is {_a(target.spec_method)} draft head, not a model")
    n = target.n_nextn
    checks = [Check("method", not errors, errors[-1] if errors else
                    f"mtp: the target's own {n} nextn layer{'s' if n != 1 else ''} draft "
                    "(specdec run --method mtp)")]
    memory = check_memory(target)
    checks.append(memory)
    if not memory.ok:
        errors.append(memory.detail)
    return Verdict(ok=not errors, checks=checks, errors=errors, warnings=[])
