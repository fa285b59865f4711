"""The pair registry: the built-in pairs.toml, validation messages, layering and local lookup."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specdec_cli import hub as H
from specdec_cli.errors import UsageError
from specdec_cli.pairing import registry as R
from specdec_cli.pairing.local import resolve_local

DEEPSEEK_REPOS = {
    "DeepSeek-V4-Flash-DSpark": ("dspark", "deepseek-v4", "flash"),
    "DeepSeek-V4-Pro-DSpark": ("dspark", "deepseek-v4", "pro"),
    **{
        f"{m}_{fam}_{size}_{suffix}": (m, fam, size)
        for m, suffix in (("dspark", "block7"), ("dflash", "block7"), ("eagle3", "ttt7"))
        for fam, size in (("qwen3", "4b"), ("qwen3", "8b"), ("qwen3", "14b"), ("gemma4", "12b"))
    },
}
CLASSIC = {
    "qwen2.5-coder-1.5b+0.5b", "qwen2.5-coder-7b+0.5b", "qwen2.5-coder-14b+0.5b", "qwen2.5-coder-32b+0.5b",
    "qwen3-8b+0.6b", "qwen3-14b+0.6b", "qwen3-32b+0.6b",
    "llama3.1-8b+3.2-1b", "llama3.1-70b+3.2-1b",
    "gemma3-12b+270m", "gemma3-12b+1b", "gemma3-27b+270m", "gemma3-27b+1b",
}


@pytest.fixture(autouse=True)
def isolated_config(tmp_path, monkeypatch):
    """No real user registry leaks into a test."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


MINIMAL = """
[[pair]]
name = "mine"
method = "draft"
draft_repo = "me/draft-GGUF"
target_family = "qwen3"
target_size = "8b"
"""


# --------------------------------------------------------------------------- built-in file


def test_builtin_path_exists():
    path = R.builtin_registry_path()
    assert path.is_file() and path.name == "pairs.toml"


def test_builtin_loads_and_is_complete():
    reg = R.load_registry()
    entries = list(reg)
    assert len({e.name for e in entries}) == len(entries)
    by_repo = {e.draft_repo.split("/", 1)[1]: e for e in entries if e.draft_repo and e.draft_repo.startswith("deepseek-ai/")}
    assert set(by_repo) == set(DEEPSEEK_REPOS)
    for repo, (method, fam, size) in DEEPSEEK_REPOS.items():
        e = by_repo[repo]
        assert (e.method, e.target_family, e.target_size) == (method, fam, size), repo
        assert "convert_hf_to_gguf.py" in e.notes
        if repo.endswith(("block7", "ttt7")):
            assert e.draft_max == 7
        assert (e.draft_p_min > 0) == (method == "dspark")
    for name in ("dspark-qwen3-8b", "eagle3-gemma4-12b", "dspark-deepseek-v4-flash", "dflash-qwen3-14b"):
        assert name in reg
    assert set(reg.entries) >= CLASSIC
    for name in CLASSIC:
        e = reg.get(name)
        assert e.method == "draft" and e.target_repos and e.target_file and e.draft_repo
    ngram = reg.get("ngram")
    assert (ngram.method, ngram.target_family, ngram.target_size, ngram.draft_repo) == ("ngram", "any", "any", None)


def test_builtin_entries_survive_a_round_trip(tmp_path):
    """Every built-in entry is valid on its own and serialises to JSON."""
    for e in R.load_registry():
        assert e.method in R.METHODS
        assert e.source.endswith("pairs.toml")
        json.dumps(e.to_dict())
        assert isinstance(e.to_dict()["target_repos"], list)


# --------------------------------------------------------------------------- validation


BAD_CASES = [
    # (body of one [[pair]], what the message must contain besides the file name)
    ('name = "foo"\nmethod = "draft"\ndraft_repo = "a/b"\ntarget_family = "qwen3"\ntarget_size = "8b"\ndrft_max = 4',
     ["pair 'foo'", "unknown field 'drft_max'"]),
    ('name = "foo"\nmethod = "draft"\ndraft_repo = "a/b"\ntarget_family = "qwen3"',
     ["pair 'foo'", "missing field 'target_size'"]),
    ('method = "draft"\ndraft_repo = "a/b"\ntarget_family = "qwen3"\ntarget_size = "8b"',
     ["pair #2", "missing field 'name'"]),
    ('name = "foo"\nmethod = "medusa"\ndraft_repo = "a/b"\ntarget_family = "qwen3"\ntarget_size = "8b"',
     ["pair 'foo'", "field 'method'", "medusa"]),
    ('name = "foo"\nmethod = "draft"\ndraft_repo = "a/b"\ntarget_family = "qwen3"\ntarget_size = "8b"\ndraft_max = "8"',
     ["pair 'foo'", "field 'draft_max'", "integer"]),
    ('name = "foo"\nmethod = "draft"\ndraft_repo = "a/b"\ntarget_family = "qwen3"\ntarget_size = "8b"\ndraft_max = true',
     ["pair 'foo'", "field 'draft_max'"]),
    ('name = "foo"\nmethod = "draft"\ndraft_repo = "a/b"\ntarget_family = "qwen3"\ntarget_size = "8b"\ndraft_max = 0',
     ["pair 'foo'", "field 'draft_max'", "at least 1"]),
    ('name = "foo"\nmethod = "draft"\ndraft_repo = "a/b"\ntarget_family = "qwen3"\ntarget_size = "8b"\ndraft_p_min = 1.5',
     ["pair 'foo'", "field 'draft_p_min'"]),
    ('name = "foo"\nmethod = "draft"\ndraft_repo = "a/b"\ntarget_family = "qwen3"\ntarget_size = "8b"\ndraft_min = 9',
     ["pair 'foo'", "field 'draft_min'"]),
    ('name = "foo"\nmethod = "draft"\ndraft_repo = "a/b"\ntarget_family = "Qwen3"\ntarget_size = "8b"',
     ["pair 'foo'", "field 'target_family'"]),
    ('name = "Foo Bar"\nmethod = "draft"\ndraft_repo = "a/b"\ntarget_family = "qwen3"\ntarget_size = "8b"',
     ["pair 'Foo Bar'", "field 'name'"]),
    ('name = "foo"\nmethod = "draft"\ntarget_family = "qwen3"\ntarget_size = "8b"',
     ["pair 'foo'", "missing field 'draft_repo'"]),
    ('name = "foo"\nmethod = "ngram"\ndraft_repo = "a/b"\ntarget_family = "any"\ntarget_size = "any"',
     ["pair 'foo'", "field 'draft_repo'", "ngram"]),
    ('name = "foo"\nmethod = "draft"\ndraft_repo = "a/b"\ntarget_family = "qwen3"\ntarget_size = "8b"\ntarget_repos = "x/y"',
     ["pair 'foo'", "field 'target_repos'"]),
    ('name = "foo"\nmethod = "draft"\ndraft_repo = "a/b"\ntarget_family = "qwen3"\ntarget_size = "8b"\ntarget_repos = ["x/y"]',
     ["pair 'foo'", "field 'target_file'"]),
]


@pytest.mark.parametrize("body,expected", BAD_CASES, ids=[e[1][-1] for e in BAD_CASES])
def test_bad_entries_raise_one_clear_error(tmp_path, body, expected):
    path = write(tmp_path / "bad.toml", MINIMAL + "\n[[pair]]\n" + body + "\n")
    with pytest.raises(R.RegistryError) as info:
        R.parse_registry_file(path)
    err = info.value
    assert isinstance(err, UsageError) and err.hint
    msg = str(err)
    assert "bad.toml" in msg and "\n" not in msg
    for part in expected:
        assert part in msg


def test_unknown_field_hint_suggests_the_right_one(tmp_path):
    path = write(tmp_path / "p.toml", MINIMAL + "drft_max = 4\n")
    with pytest.raises(R.RegistryError) as info:
        R.parse_registry_file(path)
    assert "draft_max" in info.value.hint


def test_duplicate_name_in_one_file(tmp_path):
    path = write(tmp_path / "dup.toml", MINIMAL + MINIMAL)
    with pytest.raises(R.RegistryError, match=r"dup\.toml: pair 'mine': duplicate 'name'"):
        R.parse_registry_file(path)


def test_toml_syntax_error_is_one_line(tmp_path):
    path = write(tmp_path / "broken.toml", '[[pair]]\nname = "x"\nmethod = \n')
    with pytest.raises(R.RegistryError) as info:
        R.parse_registry_file(path)
    msg = str(info.value)
    assert "broken.toml" in msg and "line 3" in msg and "\n" not in msg


def test_unknown_top_level_key_and_single_table(tmp_path):
    with pytest.raises(R.RegistryError, match="top-level key 'pairs'"):
        R.parse_registry_file(write(tmp_path / "a.toml", "[[pairs]]\nname = 'x'\n"))
    with pytest.raises(R.RegistryError, match=r"\[\[pair\]\]"):
        R.parse_registry_file(write(tmp_path / "b.toml", "[pair]\nname = 'x'\n"))


def test_home_is_shown_as_tilde(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    path = write(tmp_path / ".config" / "specdec" / "pairs.toml", MINIMAL + "drft_max = 4\n")
    with pytest.raises(R.RegistryError) as info:
        R.parse_registry_file(path)
    assert str(info.value).startswith("~/.config/specdec/pairs.toml: pair 'mine': unknown field 'drft_max'")


def test_valid_entry_fields_and_defaults(tmp_path):
    path = write(tmp_path / "ok.toml", MINIMAL + 'draft_p_min = 1\ntarget_repos = ["x/y"]\ntarget_file = "m-{quant}.gguf"\n')
    (e,) = R.parse_registry_file(path)
    assert e.draft_file == "*.gguf" and e.draft_max is None and e.draft_min is None
    assert e.draft_p_min == 1.0 and isinstance(e.draft_p_min, float)
    assert e.target_repos == ("x/y",) and e.source.endswith("ok.toml")
    assert R.parse_registry_file(write(tmp_path / "empty.toml", "# nothing yet\n")) == []


# --------------------------------------------------------------------------- layering


def test_user_registry_overrides_and_adds(tmp_path):
    user = R.user_registry_path()
    assert user == tmp_path / "config" / "specdec" / "pairs.toml"
    write(user, """
[[pair]]
name = "dspark-qwen3-8b"
method = "dspark"
draft_path = "~/models/dspark-qwen3-8b.gguf"
target_family = "qwen3"
target_size = "8b"
draft_max = 5

[[pair]]
name = "my-pair"
method = "draft"
draft_repo = "me/tiny-GGUF"
target_family = "qwen3"
target_size = "8b"
""")
    reg = R.load_registry()
    e = reg.get("dspark-qwen3-8b")
    assert e.draft_max == 5 and e.draft_path == "~/models/dspark-qwen3-8b.gguf" and e.source.endswith("specdec/pairs.toml")
    assert list(reg.entries)[-1] == "my-pair"
    assert reg.sources == [R.builtin_registry_path(), user]


def test_user_registry_default_location(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert R.user_registry_path() == tmp_path / ".config" / "specdec" / "pairs.toml"


def test_extra_registry_file_wins_last(tmp_path):
    write(R.user_registry_path(), MINIMAL)
    extra = write(tmp_path / "extra.toml", MINIMAL.replace('"qwen3"', '"gemma3"'))
    reg = R.load_registry(extra)
    assert reg.get("mine").target_family == "gemma3"
    assert reg.get("mine").source.endswith("extra.toml")


def test_missing_extra_registry_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        R.load_registry(tmp_path / "nope.toml")


def test_error_in_user_file_names_it(tmp_path):
    write(R.user_registry_path(), MINIMAL + "drft_max = 4\n")
    with pytest.raises(R.RegistryError, match=r"specdec/pairs\.toml: pair 'mine': unknown field 'drft_max'"):
        R.load_registry()


# --------------------------------------------------------------------------- lookups


def test_get_unknown_suggests_close_names():
    reg = R.load_registry()
    with pytest.raises(UsageError) as info:
        reg.get("dspark-qwen3-9b")
    assert str(info.value) == "unknown pair 'dspark-qwen3-9b'"
    assert "did you mean: " in info.value.hint and "dspark-qwen3-8b" in info.value.hint
    assert "specdec pairs" in info.value.hint
    assert reg.get("DSpark-Qwen3-8B").name == "dspark-qwen3-8b"


def test_get_with_nothing_close():
    with pytest.raises(UsageError) as info:
        R.load_registry().get("zzzzzzzz")
    assert "specdec pairs" in info.value.hint


def test_filter_by_method_and_target():
    reg = R.load_registry()
    dspark = reg.filter(method="dspark")
    assert {e.name for e in dspark} == {
        "dspark-qwen3-4b", "dspark-qwen3-8b", "dspark-qwen3-14b", "dspark-gemma4-12b",
        "dspark-deepseek-v4-flash", "dspark-deepseek-v4-pro",
    }
    gemma4 = reg.filter(target="Gemma4")
    assert {e.method for e in gemma4} == {"dspark", "dflash", "eagle3"}
    assert {e.name for e in reg.filter(method="eagle3", target="qwen3-8b")} == {"eagle3-qwen3-8b"}
    assert {e.name for e in reg.filter(target="coder")} >= {"qwen2.5-coder-7b+0.5b"}
    assert {e.name for e in reg.filter(target="deepseek-v4")} == {"dspark-deepseek-v4-flash", "dspark-deepseek-v4-pro",
                                                                  "mtp-deepseek-v4-flash", "mtp-deepseek-v4-pro"}
    assert {e.name for e in reg.filter(method="dspark", target="flash")} == {"dspark-deepseek-v4-flash"}
    assert len(reg.filter()) == len(reg)
    with pytest.raises(UsageError, match="unknown method 'medusa'"):
        reg.filter(method="medusa")


def test_for_target_and_wildcards():
    reg = R.load_registry()
    names = {e.name for e in reg.for_target("Qwen3", "8B")}
    assert names == {"qwen3-8b+0.6b", "dspark-qwen3-8b", "dflash-qwen3-8b", "eagle3-qwen3-8b", "ngram"}
    fam_only = {e.name for e in reg.for_target("qwen3", None)}
    assert {"qwen3-32b+0.6b", "dspark-qwen3-4b", "ngram"} <= fam_only
    assert {e.name for e in reg.for_target("mistral", "7b")} == {"ngram"}
    ngram = reg.get("ngram")
    assert ngram.matches_target("anything", "at-all") and ngram.matches_target("x", None)
    assert not reg.get("qwen3-8b+0.6b").matches_target("qwen3", "14b")


# --------------------------------------------------------------------------- resolve_local


def entry(**kw) -> R.PairEntry:
    base = dict(name="t", method="draft", target_family="qwen3", target_size="8b")
    return R.PairEntry(**{**base, **kw})


def test_resolve_with_local_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    target = write(tmp_path / "models" / "target.gguf", "x")
    draft = write(tmp_path / "models" / "draft.gguf", "x")
    got = resolve_local(entry(target_path="~/models/target.gguf", draft_path=str(draft)))
    assert (got.target, got.draft, got.missing) == (target, draft, [])

    got = resolve_local(entry(target_path=str(target), draft_path="~/models/gone.gguf"))
    assert got.target == target and got.draft is None
    assert len(got.missing) == 1 and got.missing[0].startswith("draft ~/models/gone.gguf")


def test_resolve_ngram_has_no_draft(tmp_path):
    target = write(tmp_path / "t.gguf", "x")
    got = resolve_local(entry(method="ngram", target_family="any", target_size="any", target_path=str(target)))
    assert got.draft is None and got.missing == []


def test_resolve_without_any_target_source():
    got = resolve_local(entry(draft_path="/nonexistent/d.gguf"))
    assert got.target is None and len(got.missing) == 2
    assert got.missing[0].startswith("target qwen3 8b")


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face hub cache under tmp_path, seen by huggingface_hub and us."""
    from huggingface_hub import constants

    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def cache_file(cache: Path, repo: str, filename: str, sha: str = "a" * 40, main: bool = True) -> Path:
    """Lay a file out the way huggingface_hub does: blob + snapshot symlink + refs/main."""
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    blob = repo_dir / "blobs" / f"{abs(hash((sha, filename))):x}"
    write(blob, "gguf")
    snap = repo_dir / "snapshots" / sha / filename
    snap.parent.mkdir(parents=True, exist_ok=True)
    try:
        snap.symlink_to(os.path.relpath(blob, snap.parent))
    except OSError:  # no symlinks (Windows without privileges): a plain copy is also a valid cache
        write(snap, "gguf")
    if main:
        write(repo_dir / "refs" / "main", sha)
    return snap


def test_fake_cache_is_what_huggingface_hub_sees(hf_cache):
    import huggingface_hub as hub

    snap = cache_file(hf_cache, "Qwen/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf")
    assert hub.try_to_load_from_cache("Qwen/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf") == str(snap)
    assert H.hf_hub_cache() == hf_cache


def test_resolve_from_hf_cache(hf_cache):
    e = R.load_registry().get("qwen3-8b+0.6b")
    assert resolve_local(e).missing == [
        "target Qwen/Qwen3-8B-GGUF/Qwen3-8B-Q4_K_M.gguf (not in the Hugging Face cache; also looked in unsloth/Qwen3-8B-GGUF)",
        "draft Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf (not in the Hugging Face cache)",
    ]
    draft = cache_file(hf_cache, "Qwen/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf")
    target = cache_file(hf_cache, "unsloth/Qwen3-8B-GGUF", "Qwen3-8B-Q4_K_M.gguf")  # second repo
    cache_file(hf_cache, "unsloth/Qwen3-8B-GGUF", "Qwen3-8B-Q8_0.gguf")
    got = resolve_local(e)
    assert (got.target, got.draft, got.missing) == (target, draft, [])
    assert resolve_local(e, quant="Q8_0").target.name == "Qwen3-8B-Q8_0.gguf"
    assert resolve_local(e, quant="Q2_K").target is None


def test_resolve_case_insensitive_and_split(hf_cache):
    e = R.load_registry().get("qwen2.5-coder-32b+0.5b")
    cache_file(hf_cache, "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF", "qwen2.5-coder-0.5b-instruct-q8_0.gguf")
    for i in (2, 1, 3):
        cache_file(hf_cache, "Qwen/Qwen2.5-Coder-32B-Instruct-GGUF",
                   f"qwen2.5-coder-32b-instruct-q4_k_m-0000{i}-of-00003.gguf")
    got = resolve_local(e)  # template says Q4_K_M, files are lowercase and split
    assert got.missing == []
    assert got.target.name == "qwen2.5-coder-32b-instruct-q4_k_m-00001-of-00003.gguf"
    assert got.draft.name == "qwen2.5-coder-0.5b-instruct-q8_0.gguf"


def test_resolve_glob_draft_skips_projectors_and_prefers_main(hf_cache):
    repo = "deepseek-ai/dspark_qwen3_8b_block7"
    cache_file(hf_cache, repo, "mmproj-f16.gguf")
    cache_file(hf_cache, repo, "old.gguf", sha="b" * 40, main=False)
    new = cache_file(hf_cache, repo, "sub/dspark-q8_0.gguf")
    e = entry(method="dspark", draft_repo=repo, target_path="/nonexistent.gguf")
    got = resolve_local(e)
    assert got.draft == new
    assert got.missing == ["target /nonexistent.gguf (the target_path does not exist)"]


# --------------------------------------------------------------------------- MTP and Qwen3.5 entries

MTP = {
    "mtp-qwen3.5-9b", "mtp-qwen3.5-27b", "mtp-qwen3.5-35b-a3b", "mtp-qwen3.6-27b", "mtp-qwen3.6-35b-a3b",
    "mtp-deepseek-v4-flash", "mtp-deepseek-v4-pro",
}


def test_mtp_entries_parse_and_list():
    reg = R.load_registry()
    mtp = reg.filter(method="mtp")
    assert {e.name for e in mtp} == MTP
    for e in mtp:
        assert (e.draft_repo, e.draft_path, e.draft_file) == (None, None, "*.gguf"), e.name
        assert e.draft_max in (2, 3) and e.draft_p_min == 0.0, e.name  # llama.cpp: n_max 3 (V4: 2), p_min 0
        assert "specdec detects the MTP layers from the GGUF itself" in e.notes and "--no-mtp" in e.notes
        if e.target_family == "deepseek-v4":
            assert not e.target_repos and "target_path" in e.notes and "not verified" in e.notes
        else:
            assert e.target_repos and all(r.startswith("unsloth/") and r.endswith("-MTP-GGUF") for r in e.target_repos)
            assert "{quant}" in e.target_file and e.target_quant and "hybrid" in e.notes
    assert {(e.target_family, e.target_size) for e in mtp} >= {
        ("qwen3.5", "9b"), ("qwen3.5", "27b"), ("qwen3.5", "35b-a3b"), ("qwen3.6", "27b"),
        ("deepseek-v4", "flash"), ("deepseek-v4", "pro")}
    assert {e.name for e in reg.for_target("Qwen3.5", "9B")} == {"qwen3.5-9b+0.8b", "mtp-qwen3.5-9b", "ngram"}
    assert {e.name for e in reg.for_target("deepseek-v4", "flash")} == {
        "dspark-deepseek-v4-flash", "mtp-deepseek-v4-flash", "ngram"}


def test_pairs_method_mtp_on_the_command_line(tmp_path):
    from test_cli import specdec

    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "COLUMNS": "160"}
    proc = specdec("pairs", "--method", "mtp", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert {e["name"] for e in got} == MTP and {e["method"] for e in got} == {"mtp"}
    assert all(e["draft_repo"] is None and e["draft_path"] is None for e in got)
    table = specdec("pairs", "--method", "mtp", env=env)
    assert table.returncode == 0, table.stderr
    rows = [ln.split() for ln in table.stdout.splitlines() if ln.strip().startswith("mtp-")]
    assert {r[0] for r in rows} == MTP
    assert all(r[1] == "mtp" for r in rows)
    assert "(the target's MTP layers)" in table.stdout


def test_mtp_entry_in_a_user_file(tmp_path):
    path = write(tmp_path / "p.toml", '[[pair]]\nname = "my-glm-mtp"\nmethod = "mtp"\ntarget_family = "glm4.5"\n'
                                      'target_size = "air"\ntarget_path = "~/models/glm.gguf"\ndraft_max = 2\n')
    (e,) = R.parse_registry_file(path)
    assert (e.method, e.draft_repo, e.draft_path, e.target_path, e.draft_max) == (
        "mtp", None, None, "~/models/glm.gguf", 2)
    reg = R.load_registry(path)
    assert reg.get("my-glm-mtp") == e and e in reg.filter(method="mtp")


@pytest.mark.parametrize("key", ["draft_repo", "draft_path", "draft_file"])
def test_mtp_entry_with_a_draft_is_refused_in_one_line(tmp_path, key):
    path = write(tmp_path / "bad.toml", f'[[pair]]\nname = "foo"\nmethod = "mtp"\n{key} = "org/draft-GGUF"\n'
                                        'target_family = "qwen3.5"\ntarget_size = "9b"\n')
    with pytest.raises(R.RegistryError) as info:
        R.parse_registry_file(path)
    err = info.value
    assert isinstance(err, UsageError)
    assert str(err).endswith(f"bad.toml: pair 'foo': field '{key}' does not apply to method 'mtp' "
                             "(it drafts with the target's own MTP layers)")
    assert err.hint.startswith(f"remove {key}; point target_path or target_repos at a GGUF that keeps")
    line = err.one_line()
    assert "\n" not in line and "pair 'foo'" in line and "mtp" in line


def test_qwen35_classic_pairs_resolve(hf_cache):
    reg = R.load_registry()
    draft = cache_file(hf_cache, "ggml-org/Qwen3.5-0.8B-GGUF", "Qwen3.5-0.8B-Q8_0.gguf")
    for size, label in (("9b", "9B"), ("27b", "27B")):
        e = reg.get(f"qwen3.5-{size}+0.8b")
        assert (e.method, e.target_family, e.target_size) == ("draft", "qwen3.5", size)
        assert "hybrid" in e.notes and "recurrent-state snapshots" in e.notes
        assert resolve_local(e).missing == [
            f"target unsloth/Qwen3.5-{label}-GGUF/Qwen3.5-{label}-Q4_K_M.gguf (not in the Hugging Face cache)"]
        target = cache_file(hf_cache, f"unsloth/Qwen3.5-{label}-GGUF", f"Qwen3.5-{label}-Q4_K_M.gguf")
        got = resolve_local(e)
        assert (got.target, got.draft, got.missing) == (target, draft, [])
    assert {e.name for e in reg.for_target("qwen3.5", "27b")} == {"qwen3.5-27b+0.8b", "mtp-qwen3.5-27b", "ngram"}
