"""The plan builder: one immutable plan per command, each setting with where it came from."""

import dataclasses

import pytest

from specdec_cli.engine.decode.engine import AUTO_DRAFT_MAX, DraftOptions
from specdec_cli.errors import UsageError
from specdec_cli.models.methods import Method
from specdec_cli.pairing.plan import DraftFlags, ModelChoice, build_plan
from specdec_cli.pairing.registry import PairEntry, Registry
from specdec_cli.pairing.tuned import Tuned, save_tuned

DEFAULTS = DraftOptions()


@pytest.fixture(autouse=True)
def _own_config(tmp_path, monkeypatch):
    """Each test's own bench store, so one test's saved setting is not another's."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def _registry(target, draft, **settings) -> Registry:
    entry = PairEntry(name="tiny", method="draft", target_family="tiny-llama", target_size="682k",
                      target_path=str(target), draft_path=str(draft), **settings)
    return Registry(entries={"tiny": entry})


def _plan(registry, models, **kw):
    return build_plan(registry, models, fetch=False, **kw)


def _sources(plan) -> dict:
    return {k: (getattr(plan, k).value, getattr(plan, k).source)
            for k in ("target", "draft", "method", "draft_max", "draft_min", "p_min")}


def test_files_given_as_flags_say_so(tiny_target, tiny_draft):
    plan = _plan(Registry(), ModelChoice(target=str(tiny_target), draft=str(tiny_draft)))
    assert _sources(plan) == {
        "target": (tiny_target, "--target"),
        "draft": (tiny_draft, "--draft"),
        "method": ("auto", "default"),
        "draft_max": (AUTO_DRAFT_MAX, "auto"),
        "draft_min": (DEFAULTS.draft_min, "default"),
        "p_min": (DEFAULTS.p_min, "default"),
    }
    assert plan.drafter is Method.DRAFT and plan.is_auto and plan.local
    assert plan.target_info.n_vocab == plan.draft_info.n_vocab


def test_files_from_a_pair_and_settings_from_the_registry(tiny_target, tiny_draft):
    reg = _registry(tiny_target, tiny_draft, draft_max=6, draft_min=1, draft_p_min=0.4)
    plan = _plan(reg, ModelChoice(pair="tiny"), auto=False)
    assert _sources(plan) == {
        "target": (tiny_target, "pair tiny"),
        "draft": (tiny_draft, "pair tiny"),
        "method": ("draft", "pair tiny"),
        "draft_max": (6, "registry"),
        "draft_min": (1, "registry"),
        "p_min": (0.4, "registry"),
    }
    assert plan.entry is reg.get("tiny")


def test_a_flag_beats_bench_which_beats_the_registry_which_beats_the_default(tiny_target, tiny_draft):
    reg = _registry(tiny_target, tiny_draft, draft_max=6, draft_p_min=0.4)
    save_tuned(tiny_target, tiny_draft, Tuned(use_draft=True, method="draft", draft_max=3, p_min=0.2, speedup=1.3))
    plan = _plan(reg, ModelChoice(pair="tiny"), auto=False, flags=DraftFlags(p_min=0.9))
    assert (plan.p_min.value, plan.p_min.source) == (0.9, "flag")
    assert (plan.draft_max.value, plan.draft_max.source) == (3, "bench")
    assert (plan.draft_min.value, plan.draft_min.source) == (DEFAULTS.draft_min, "default")
    flagged = _plan(reg, ModelChoice(pair="tiny"), flags=DraftFlags(draft_max=5, draft_min=2, p_min=0.1))
    assert {k: getattr(flagged, k).source for k in ("draft_max", "draft_min", "p_min")} == dict.fromkeys(
        ("draft_max", "draft_min", "p_min"), "flag")
    assert flagged.draft_max.value == 5  # auto keeps a draft length given on the command line


def test_a_draft_that_bench_found_slower_is_dropped_and_the_plan_says_bench(tiny_target, tiny_draft):
    save_tuned(tiny_target, tiny_draft, Tuned(use_draft=False, method="draft", draft_max=4, p_min=0.5, speedup=0.8))
    models = ModelChoice(target=str(tiny_target), draft=str(tiny_draft))
    plan = _plan(Registry(), models)
    assert (plan.draft.value, plan.draft.source) == (None, "bench")
    assert (plan.method.value, plan.method.source) == ("auto", "bench")
    assert plan.drafter is None and plan.draft_info is None
    assert any("slower" in n for n in plan.notes)
    kept = _plan(Registry(), models, follow_bench=False)  # --explain-divergence, bench and export ignore it
    assert kept.draft.value == tiny_draft and kept.draft.source == "--draft"


def test_a_stored_auto_verdict_sets_the_draft_length_from_bench(tiny_target, tiny_draft):
    save_tuned(tiny_target, tiny_draft, Tuned(use_draft=True, method="auto", draft_max=8, p_min=0.5, speedup=1.1))
    plan = _plan(Registry(), ModelChoice(target=str(tiny_target), draft=str(tiny_draft)))
    assert (plan.draft_max.value, plan.draft_max.source) == (AUTO_DRAFT_MAX, "bench")


def test_a_forced_method_says_flag_and_no_draft_says_so(tiny_target, tiny_draft):
    models = ModelChoice(target=str(tiny_target), draft=str(tiny_draft))
    forced = _plan(Registry(), models, method="draft")
    assert (forced.method.value, forced.method.source) == ("draft", "flag") and not forced.is_auto
    ngram = _plan(Registry(), ModelChoice(target=str(tiny_target)), method="ngram")
    assert (ngram.method.value, ngram.drafter, ngram.draft.value) == ("ngram", Method.NGRAM, None)
    alone = _plan(Registry(), ModelChoice(target=str(tiny_target)), no_draft=True)
    assert (alone.draft.value, alone.draft.source, alone.method.value) == (None, "--no-draft", None)


def test_contradictions_are_refused_before_anything_loads(tiny_target, tiny_draft):
    with pytest.raises(UsageError, match="--no-draft"):
        _plan(Registry(), ModelChoice(target=str(tiny_target), draft=str(tiny_draft)), no_draft=True)
    with pytest.raises(UsageError, match="--method eagle3"):
        _plan(Registry(), ModelChoice(target=str(tiny_target)), method="eagle3")


def test_the_plan_and_its_settings_cannot_be_changed(tiny_target, tiny_draft):
    plan = _plan(Registry(), ModelChoice(target=str(tiny_target), draft=str(tiny_draft)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.method = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.draft_max.value = 1
    assert isinstance(plan.warnings, tuple) and isinstance(plan.notes, tuple)
    assert build_plan(Registry(), ModelChoice(target=str(tiny_target), draft=str(tiny_draft)), fetch=False) == plan
