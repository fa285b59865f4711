"""specdec export: the exact command line for each engine and method, and the refusals.

The pinned argv below follow the engines' own sources (cited in specdec_cli/export.py).
Where an engine's parser is importable here (SGLang's ServerArgs, vLLM's serve parser;
both need torch, so usually skipped) it must accept the output too; the llama.cpp
spellings are checked against the vendored sources when they are on this machine, and a
real llama-server binary (SPECDEC_LLAMA_SERVER=path) is started on the tiny models.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from specdec_cli import export as export_mod
from specdec_cli.errors import EXIT_FAILURE, EXIT_USAGE, SpecdecError, UsageError
from specdec_cli.export import ENGINES, NGRAM_MATCH, Export, ExportSpec, export
from specdec_cli.pairing.registry import METHODS

T_GGUF = "/models/Qwen3-8B-Q4_K_M.gguf"
T_REPO = "Qwen/Qwen3-8B"
Q35_GGUF = "/models/Qwen3.5-9B-Q4_K_M.gguf"  # MTP: a target that drafts for itself
Q35_REPO = "Qwen/Qwen3.5-9B"


def spec_for(method: str, **kw) -> ExportSpec:
    """A spec as `specdec export --pair ...` would resolve it, per method (registry-like settings)."""
    base = {
        "draft": dict(target="/models/qwen2.5-coder-7b-instruct-q4_k_m.gguf",
                      draft="/models/qwen2.5-coder-0.5b-instruct-q8_0.gguf",
                      target_repo="Qwen/Qwen2.5-Coder-7B-Instruct", draft_repo="Qwen/Qwen2.5-Coder-0.5B-Instruct",
                      draft_max=8, draft_min=0, p_min=0.75, settings_source="registry"),
        "eagle3": dict(target=T_GGUF, draft="/models/Qwen3-8B-eagle3.gguf", target_repo=T_REPO,
                       draft_repo="deepseek-ai/eagle3_qwen3_8b_ttt7", draft_max=7, draft_min=0, p_min=0.0,
                       settings_source="registry"),
        "dflash": dict(target=T_GGUF, draft="/models/Qwen3-8B-DFlash.gguf", target_repo=T_REPO,
                       draft_repo="deepseek-ai/dflash_qwen3_8b_block7", draft_max=6, draft_min=0, p_min=0.0,
                       settings_source="bench"),
        "dspark": dict(target=T_GGUF, draft="/models/Qwen3-8B-DSpark.gguf", target_repo=T_REPO,
                       draft_repo="deepseek-ai/dspark_qwen3_8b_block7", draft_max=7, draft_min=0, p_min=0.5,
                       settings_source="registry"),
        "ngram": dict(target=T_GGUF, draft=None, target_repo=T_REPO, draft_max=8, draft_min=0, p_min=0.0,
                      settings_source="defaults"),
        "mtp": dict(target=Q35_GGUF, draft=None, target_repo=Q35_REPO, draft_max=3, draft_min=0, p_min=0.0,
                    settings_source="registry"),
    }[method]
    base.update(kw)
    return ExportSpec(method=method, **base)


# --------------------------------------------------------------------------- exact argv

EXPECTED = {
    ("llama-server", "draft"): [
        "llama-server", "-m", "/models/qwen2.5-coder-7b-instruct-q4_k_m.gguf",
        "-md", "/models/qwen2.5-coder-0.5b-instruct-q8_0.gguf", "--spec-type", "draft-simple",
        "--spec-draft-n-max", "8", "--spec-draft-n-min", "0", "--spec-draft-p-min", "0.75"],
    ("llama-server", "eagle3"): [
        "llama-server", "-m", T_GGUF, "-md", "/models/Qwen3-8B-eagle3.gguf", "--spec-type", "draft-eagle3",
        "--spec-draft-n-max", "7", "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"],
    ("llama-server", "dflash"): [
        "llama-server", "-m", T_GGUF, "-md", "/models/Qwen3-8B-DFlash.gguf", "--spec-type", "draft-dflash",
        "--spec-draft-n-max", "6", "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"],
    ("llama-server", "dspark"): [
        "llama-server", "-m", T_GGUF, "-md", "/models/Qwen3-8B-DSpark.gguf", "--spec-type", "draft-dspark",
        "--spec-draft-n-max", "7", "--spec-draft-n-min", "0", "--spec-draft-p-min", "0.5"],
    ("llama-server", "ngram"): [
        "llama-server", "-m", T_GGUF, "--spec-type", "ngram-simple",
        "--spec-ngram-simple-size-n", "2", "--spec-ngram-simple-size-m", "8"],
    ("vllm", "draft"): [
        "vllm", "serve", "Qwen/Qwen2.5-Coder-7B-Instruct", "--speculative-config",
        '{"method": "draft_model", "model": "Qwen/Qwen2.5-Coder-0.5B-Instruct", "num_speculative_tokens": 8}'],
    ("vllm", "eagle3"): [
        "vllm", "serve", T_REPO, "--speculative-config",
        '{"method": "eagle3", "model": "deepseek-ai/eagle3_qwen3_8b_ttt7", "num_speculative_tokens": 7}'],
    ("vllm", "dflash"): [
        "vllm", "serve", T_REPO, "--speculative-config",
        '{"method": "dflash", "model": "deepseek-ai/dflash_qwen3_8b_block7", "num_speculative_tokens": 6}'],
    ("vllm", "dspark"): [
        "vllm", "serve", T_REPO, "--speculative-config",
        '{"method": "dspark", "model": "deepseek-ai/dspark_qwen3_8b_block7", "num_speculative_tokens": 7}'],
    ("vllm", "ngram"): [
        "vllm", "serve", T_REPO, "--speculative-config",
        '{"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'],
    ("sglang", "draft"): [
        "python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-Coder-7B-Instruct",
        "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "Qwen/Qwen2.5-Coder-0.5B-Instruct",
        "--speculative-num-steps", "8", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "9"],
    ("sglang", "eagle3"): [
        "python3", "-m", "sglang.launch_server", "--model-path", T_REPO, "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "deepseek-ai/eagle3_qwen3_8b_ttt7",
        "--speculative-num-steps", "7", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "8"],
    ("sglang", "dflash"): [
        "python3", "-m", "sglang.launch_server", "--model-path", T_REPO, "--speculative-algorithm", "DFLASH",
        "--speculative-draft-model-path", "deepseek-ai/dflash_qwen3_8b_block7",
        "--speculative-num-draft-tokens", "7"],
    ("sglang", "dspark"): [
        "python3", "-m", "sglang.launch_server", "--model-path", T_REPO, "--speculative-algorithm", "DSPARK",
        "--speculative-draft-model-path", "deepseek-ai/dspark_qwen3_8b_block7",
        "--speculative-dspark-block-size", "7", "--speculative-num-draft-tokens", "8"],
    ("sglang", "ngram"): [
        "python3", "-m", "sglang.launch_server", "--model-path", T_REPO, "--speculative-algorithm", "NGRAM",
        "--speculative-num-draft-tokens", "9"],
}
# MTP: no draft model anywhere; the target's own nextn layers draft (llama.cpp draft-mtp, vLLM
# "mtp" with the target as its default model, SGLang EAGLE with the target as the draft path)
EXPECTED.update({
    ("llama-server", "mtp"): [
        "llama-server", "-m", Q35_GGUF, "--spec-type", "draft-mtp",
        "--spec-draft-n-max", "3", "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"],
    ("vllm", "mtp"): [
        "vllm", "serve", Q35_REPO, "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}'],
    ("sglang", "mtp"): [
        "python3", "-m", "sglang.launch_server", "--model-path", Q35_REPO, "--speculative-algorithm", "EAGLE",
        "--speculative-draft-model-path", Q35_REPO,
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"],
})


def test_every_engine_and_method_is_pinned():
    assert set(EXPECTED) == {(e, m) for e in ENGINES for m in METHODS}
    assert export_mod.METHODS == METHODS


@pytest.mark.parametrize("engine,method", sorted(EXPECTED))
def test_exact_argv(engine, method):
    out = export(spec_for(method), engine)
    assert isinstance(out, Export)
    assert out.engine == engine and out.method == method
    assert out.argv == EXPECTED[(engine, method)]
    assert shlex.split(out.command_line()) == out.argv


def test_engine_name_is_case_and_space_insensitive():
    assert export(spec_for("eagle3"), " VLLM ").engine == "vllm"


# --------------------------------------------------------------------------- notes


def test_notes_say_where_the_settings_came_from():
    assert export(spec_for("dspark"), "llama-server").notes[0] == (
        "settings from the registry entry: draft-max 7, draft-min 0, p-min 0.5")
    assert export(spec_for("dflash"), "vllm").notes[0] == (
        "settings from the stored bench recommendation: draft-max 6, draft-min 0, p-min 0")
    assert export(spec_for("ngram"), "sglang").notes[0] == "settings from specdec's defaults: draft-max 8"
    flags = export(spec_for("draft", settings_source="flags"), "llama-server")
    assert flags.notes == ["settings from the command-line flags: draft-max 8, draft-min 0, p-min 0.75"]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_settings_the_engine_lacks_go_to_notes_not_argv(engine):
    out = export(spec_for("draft", draft_min=2), engine)
    name = {"vllm": "vLLM", "sglang": "SGLang"}[engine]
    assert any(n.startswith(f"p-min 0.75 dropped: {name} has no draft-confidence cut-off") for n in out.notes)
    assert f"draft-min 2 dropped: {name} has no minimum draft length" in out.notes
    assert not any("p-min" in a or "0.75" in a for a in out.argv)
    # GGUF paths were given as well: the note says which checkpoint is served instead
    assert any(n.startswith(f"target: {name} loads the Hugging Face checkpoint Qwen/Qwen2.5-Coder-7B-Instruct, "
                            "not the GGUF /models/qwen2.5-coder-7b-instruct-q4_k_m.gguf") for n in out.notes)


def test_p_min_zero_is_not_reported_as_dropped():
    out = export(spec_for("eagle3"), "vllm")
    assert not any("dropped" in n and "p-min" in n for n in out.notes)


def test_ngram_drops_p_min_and_a_stray_draft():
    out = export(spec_for("ngram", p_min=0.5, draft="/models/x.gguf", draft_min=1), "llama-server")
    assert "p-min 0.5 dropped: n-gram lookup has no draft probabilities" in out.notes
    assert "draft /models/x.gguf dropped: n-gram lookup uses no draft model" in out.notes
    assert "draft-min 1 dropped: llama-server's n-gram lookup has no minimum draft length" in out.notes
    assert "-md" not in out.argv


# --------------------------------------------------------------------------- llama.cpp options


def test_llama_server_gpu_layers_and_context():
    out = export(spec_for("draft", gpu_layers=-1, gpu_layers_draft=10, ctx=8192), "llama-server")
    assert out.argv[-6:] == ["-ngl", "all", "-ngld", "10", "-c", "8192"]
    # the draft follows the target's layer count when not given, as in specdec run
    out = export(spec_for("eagle3", gpu_layers=20), "llama-server")
    assert out.argv[-4:] == ["-ngl", "20", "-ngld", "20"]
    out = export(spec_for("eagle3", gpu_layers_draft=0), "llama-server")
    assert out.argv[-2:] == ["-ngld", "0"] and "-ngl" not in out.argv


def test_llama_server_ngram_has_no_draft_layers():
    out = export(spec_for("ngram", gpu_layers=99, gpu_layers_draft=99, ctx=4096), "llama-server")
    assert out.argv[-4:] == ["-ngl", "99", "-c", "4096"]
    assert "-ngld" not in out.argv
    assert "-ngld dropped: n-gram lookup has no draft model" in out.notes


def test_ngram_sizes_follow_run():
    out = export(spec_for("ngram"), "llama-server")
    assert "llama-server's ngram-simple matches 2-grams only (specdec tries 4 down to 2)" in out.notes
    out = export(spec_for("ngram", draft_max=1), "llama-server")
    assert out.argv[-4:] == ["--spec-ngram-simple-size-n", "1", "--spec-ngram-simple-size-m", "1"]
    assert any(n.startswith("n-gram size lowered from 2 to 1") for n in out.notes)
    out = export(spec_for("ngram", ngram_min=3, ngram_max=5), "vllm")
    assert out.speculative_config["prompt_lookup_max"] == 5 and out.speculative_config["prompt_lookup_min"] == 3
    out = export(spec_for("ngram", ngram_min=3), "sglang")
    assert "n-gram sizes 3-4 dropped: SGLang has no such setting" in out.notes
    with pytest.raises(UsageError):
        export(spec_for("ngram", ngram_min=5, ngram_max=3), "vllm")


def test_ngram_sizes_are_those_of_runs_drafter():
    import inspect

    from specdec_cli.engine.drafters.ngram import NgramDrafter

    params = inspect.signature(NgramDrafter.__init__).parameters
    assert (params["n_min"].default, params["n_max_match"].default) == NGRAM_MATCH


def test_llama_server_has_no_tensor_parallel_flag():
    out = export(spec_for("eagle3", tensor_parallel=4), "llama-server")
    assert out.argv == EXPECTED[("llama-server", "eagle3")]
    assert any(n.startswith("tensor parallel 4 not set: llama-server has no tensor-parallel size") and "--rpc" in n
               for n in out.notes)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_gpu_layers_are_dropped_with_a_note(engine):
    out = export(spec_for("eagle3", gpu_layers=-1, gpu_layers_draft=3), engine)
    assert "-ngl" not in out.argv and "-ngld" not in out.argv
    assert any(n.startswith("-ngl/-ngld dropped:") for n in out.notes)


# --------------------------------------------------------------------------- tensor parallel, context


def test_vllm_tensor_parallel_and_context():
    out = export(spec_for("eagle3", tensor_parallel=2, ctx=16384), "vllm")
    assert out.argv == EXPECTED[("vllm", "eagle3")] + ["--tensor-parallel-size", "2", "--max-model-len", "16384"]


def test_sglang_tensor_parallel_and_context():
    out = export(spec_for("dspark", tensor_parallel=8, ctx=32768), "sglang")
    assert out.argv == EXPECTED[("sglang", "dspark")] + ["--tp-size", "8", "--context-length", "32768"]


# --------------------------------------------------------------------------- quoting, JSON


def test_command_line_quotes_json_and_paths():
    out = export(spec_for("eagle3"), "vllm")
    assert out.command_line() == (
        "vllm serve Qwen/Qwen3-8B --speculative-config "
        "'{\"method\": \"eagle3\", \"model\": \"deepseek-ai/eagle3_qwen3_8b_ttt7\", \"num_speculative_tokens\": 7}'")
    odd = export(spec_for("draft", target="/my models/it's.gguf"), "llama-server")
    assert odd.command_line().startswith("llama-server -m '/my models/it'\"'\"'s.gguf' -md ")
    assert shlex.split(odd.command_line()) == odd.argv


def test_to_dict_shape():
    out = export(spec_for("dflash", tensor_parallel=2), "vllm")
    d = out.to_dict()
    assert list(d) == ["engine", "method", "command", "argv", "speculative_config", "notes"]
    assert d["engine"] == "vllm" and d["method"] == "dflash"
    assert d["command"] == out.command_line() and d["argv"] == out.argv
    assert d["speculative_config"] == {"method": "dflash", "model": "deepseek-ai/dflash_qwen3_8b_block7",
                                       "num_speculative_tokens": 6}
    assert d["notes"] == out.notes
    assert json.loads(json.dumps(d)) == d
    d2 = export(spec_for("dflash"), "llama-server").to_dict()
    assert d2["speculative_config"] is None and d2["engine"] == "llama-server"


# --------------------------------------------------------------------------- block sizes, confidence head


@pytest.mark.parametrize("engine,tail", [
    ("llama-server", ["--spec-draft-n-max", "6", "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"]),
    ("vllm", ['{"method": "dflash", "model": "deepseek-ai/dflash_qwen3_8b_block7", "num_speculative_tokens": 6}']),
    ("sglang", ["--speculative-num-draft-tokens", "7"]),
])
def test_dflash_draft_is_capped_by_its_block(engine, tail):
    out = export(spec_for("dflash", draft_max=7, draft_block_size=7), engine)
    assert out.argv[-len(tail):] == tail
    assert "draft-max lowered from 7 to 6: the draft was trained with block size 7" in out.notes


def test_dspark_drafts_a_whole_block():
    out = export(spec_for("dspark", draft_max=9, draft_block_size=7), "sglang")
    assert out.argv[-4:] == ["--speculative-dspark-block-size", "7", "--speculative-num-draft-tokens", "8"]
    out = export(spec_for("dspark", draft_block_size=7), "vllm")
    assert not any(n.startswith("draft-max lowered") for n in out.notes)


def test_unknown_block_size_is_a_note():
    assert any("must not exceed what the draft was trained for" in n
               for n in export(spec_for("dflash"), "vllm").notes)
    assert "llama-server lowers --spec-draft-n-max to what the draft's trained block size allows" in \
        export(spec_for("dspark"), "llama-server").notes


def test_dspark_p_min_needs_a_confidence_head_on_llama_server():
    out = export(spec_for("dspark", draft_has_confidence_head=False), "llama-server")
    assert out.argv[-2:] == ["--spec-draft-p-min", "0"]
    assert any(n.startswith("p-min 0.5 dropped to 0: llama-server applies p-min to DSpark") for n in out.notes)
    out = export(spec_for("dspark", draft_has_confidence_head=True), "llama-server")
    assert out.argv[-2:] == ["--spec-draft-p-min", "0.5"]
    assert not any("confidence head" in n for n in out.notes)
    out = export(spec_for("dspark"), "llama-server")  # unknown: kept, with a warning
    assert out.argv[-2:] == ["--spec-draft-p-min", "0.5"]
    assert any("without a confidence head" in n for n in out.notes)


# --------------------------------------------------------------------------- refusals


def _refusal(spec: ExportSpec, engine: str) -> SpecdecError:
    with pytest.raises(SpecdecError) as info:
        export(spec, engine)
    return info.value


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("method", METHODS)
def test_hf_engines_refuse_a_gguf_only_target(engine, method):
    err = _refusal(spec_for(method, target_repo=None), engine)
    name = {"vllm": "vLLM", "sglang": "SGLang"}[engine]
    assert err.exit_code == EXIT_FAILURE and not isinstance(err, UsageError)
    assert str(err).startswith(f"{name} loads Hugging Face checkpoints, and the target is only known as a GGUF (")
    assert "--target-repo ORG/NAME" in err.hint and "llama-server" in err.hint


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_hf_engines_refuse_a_gguf_repo_as_target(engine):
    err = _refusal(spec_for("eagle3", target_repo="Qwen/Qwen3-8B-GGUF"), engine)
    assert "(/models/Qwen3-8B-Q4_K_M.gguf, Qwen/Qwen3-8B-GGUF)" in str(err)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_hf_engines_refuse_a_gguf_only_draft(engine):
    # a classic pair from the registry: its draft_repo is a GGUF repo
    err = _refusal(spec_for("draft", draft_repo="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"), engine)
    assert "the draft is only known as a GGUF (/models/qwen2.5-coder-0.5b-instruct-q8_0.gguf, " \
           "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF)" in str(err)
    assert "--draft-repo ORG/NAME" in err.hint
    assert err.one_line().endswith("or export to llama-server, which loads GGUF")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_hf_engines_take_a_repo_id_or_folder_as_target(engine, tmp_path):
    out = export(spec_for("eagle3", target="Qwen/Qwen3-8B", target_repo=None), engine)
    assert T_REPO in out.argv
    folder = tmp_path / "Qwen3-8B"
    folder.mkdir()
    out = export(spec_for("eagle3", target=str(folder), target_repo=None), engine)
    assert str(folder) in out.argv
    assert not any(n.startswith("target:") for n in out.notes)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_hf_engines_refuse_a_draft_with_another_vocabulary_size(engine):
    err = _refusal(spec_for("draft", target_n_vocab=152064, draft_n_vocab=151936), engine)
    assert "exactly the target's vocabulary size, and these differ (152064 and 151936 entries)" in str(err)
    assert "llama-server" in err.hint
    # llama.cpp accepts it; equal sizes pass everywhere
    assert export(spec_for("draft", target_n_vocab=152064, draft_n_vocab=151936), "llama-server")
    assert export(spec_for("draft", target_n_vocab=151936, draft_n_vocab=151936), engine).argv == \
        EXPECTED[(engine, "draft")]


def test_llama_server_refuses_an_unconverted_head():
    err = _refusal(spec_for("eagle3", draft=None), "llama-server")
    assert str(err) == "llama-server loads GGUF files, and the draft is not one (deepseek-ai/eagle3_qwen3_8b_ttt7)"
    assert "convert deepseek-ai/eagle3_qwen3_8b_ttt7 with llama.cpp's convert_hf_to_gguf.py --target-model-dir" \
        in err.hint


def test_llama_server_refuses_a_checkpoint_target():
    err = _refusal(spec_for("ngram", target="Qwen/Qwen3-8B"), "llama-server")
    assert str(err) == "llama-server loads GGUF files, and the target is not one (Qwen/Qwen3-8B)"
    assert "vllm or sglang" in err.hint


def test_llama_server_takes_a_gguf_file_without_the_extension(tmp_path):
    f = tmp_path / "model.bin"
    f.write_bytes(b"GGUF" + b"\0" * 20)
    assert export(spec_for("ngram", target=str(f)), "llama-server").argv[2] == str(f)
    g = tmp_path / "notes.txt"
    g.write_text("hello")
    assert _refusal(spec_for("ngram", target=str(g)), "llama-server")


def test_unknown_engine_is_a_usage_error():
    with pytest.raises(UsageError) as info:
        export(spec_for("eagle3"), "tgi")
    assert info.value.exit_code == EXIT_USAGE
    assert info.value.one_line() == "unknown engine 'tgi'. use one of: llama-server, vllm, sglang"


def test_a_method_an_engine_lacks_is_refused_naming_the_others(monkeypatch):
    # every method maps on every engine today; the refusal path is kept for when one does not
    monkeypatch.setitem(export_mod._SPELLINGS, "sglang", {k: v for k, v in export_mod._SGLANG_ALGORITHM.items()
                                                          if k != "dspark"})
    err = _refusal(spec_for("dspark"), "sglang")
    assert err.exit_code == EXIT_FAILURE and not isinstance(err, UsageError)
    assert err.one_line() == ("SGLang has no DSpark speculative decoding. "
                              "export it to llama-server or vllm instead")


@pytest.mark.parametrize("change,message", [
    (dict(method="medusa"), "unknown method 'medusa'"),
    (dict(draft_max=0), "draft-max must be at least 1, not 0"),
    (dict(draft_min=9), "draft-min must be between 0 and draft-max (8), not 9"),
    (dict(p_min=1.5), "p-min must be between 0 and 1, not 1.5"),
    (dict(ctx=0), "context must be at least 1, not 0"),
    (dict(tensor_parallel=0), "tensor parallel size must be at least 1, not 0"),
    (dict(draft=None, draft_repo=None), "a classic draft model needs a draft model and none was given"),
    (dict(target=""), "no target model to export"),
])
def test_malformed_specs_are_usage_errors(change, message):
    with pytest.raises(UsageError) as info:
        export(replace(spec_for("draft"), **change), "llama-server")
    assert str(info.value) == message and info.value.hint


# --------------------------------------------------------------------------- MTP (the target drafts for itself)


def test_mtp_needs_no_draft_and_drops_one_given():
    out = export(spec_for("mtp", draft="/models/x.gguf", gpu_layers=99, gpu_layers_draft=99, ctx=4096), "llama-server")
    assert out.argv == EXPECTED[("llama-server", "mtp")] + ["-ngl", "99", "-c", "4096"]
    assert "-md" not in out.argv and "-ngld" not in out.argv
    assert "draft /models/x.gguf dropped: MTP drafts with the target's own nextn layers" in out.notes
    assert "-ngld dropped: the MTP layers are part of the target model, and -ngl places them" in out.notes
    assert out.notes[0] == "settings from the registry entry: draft-max 3, draft-min 0, p-min 0"
    for engine in ("vllm", "sglang"):
        out = export(spec_for("mtp", draft="/models/x.gguf", draft_repo="org/some-draft"), engine)
        assert out.argv == EXPECTED[(engine, "mtp")]
        assert "org/some-draft" not in out.command_line()


def test_mtp_llama_server_reads_the_target_gguf(tmp_path):
    from tiny_memory_models import write_qwen35_gguf

    with_mtp = write_qwen35_gguf(tmp_path / "q35-mtp.gguf", nextn=1)
    without = write_qwen35_gguf(tmp_path / "q35.gguf")
    out = export(spec_for("mtp", target=str(with_mtp)), "llama-server")
    assert out.argv == ["llama-server", "-m", str(with_mtp)] + EXPECTED[("llama-server", "mtp")][3:]
    assert not any("nextn" in n for n in out.notes)
    err = _refusal(spec_for("mtp", target=str(without)), "llama-server")
    assert err.exit_code == EXIT_FAILURE and not isinstance(err, UsageError)
    assert str(err) == ("llama-server's draft-mtp drafts with the target's own nextn (MTP) layers, "
                        f"and {without} has none")
    assert "\n" not in err.one_line() and "--no-mtp" in err.hint and "-MTP-GGUF" in err.hint
    # vLLM and SGLang load the checkpoint (with its mtp.* weights), not this GGUF
    assert export(spec_for("mtp", target=str(without)), "vllm").argv == EXPECTED[("vllm", "mtp")]


def test_mtp_target_facts_from_the_caller_win():
    assert "has none" in str(_refusal(spec_for("mtp", target_has_mtp=False), "llama-server"))
    assert not any("nextn" in n for n in export(spec_for("mtp", target_has_mtp=True), "llama-server").notes)
    # a GGUF not on this machine: unknown, so a note rather than a refusal
    assert ("the target GGUF must keep its nextn (MTP) layers (converted without --no-mtp); "
            "specdec inspect shows whether it does") in export(spec_for("mtp"), "llama-server").notes


def test_mtp_settings_on_each_engine():
    out = export(spec_for("mtp", draft_max=2, draft_min=1, p_min=0.6), "llama-server")
    assert out.argv[-6:] == ["--spec-draft-n-max", "2", "--spec-draft-n-min", "1", "--spec-draft-p-min", "0.6"]
    one = export(spec_for("mtp", draft_max=1, p_min=0.6), "vllm")
    assert one.speculative_config == {"method": "mtp", "num_speculative_tokens": 1}
    assert any(n.startswith("p-min 0.6 dropped: vLLM has no draft-confidence cut-off") for n in one.notes)
    assert any("mtp.* tensors" in n and "dspark" in n for n in one.notes)
    assert not any("MTP layer again" in n for n in one.notes)
    assert any(n.startswith("with num_speculative_tokens 3 vLLM runs the model's MTP layer again")
               for n in export(spec_for("mtp"), "vllm").notes)
    out = export(spec_for("mtp", draft_max=5, draft_min=2, tensor_parallel=2, ctx=8192), "sglang")
    assert out.argv[5:] == ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", Q35_REPO,
                            "--speculative-num-steps", "5", "--speculative-eagle-topk", "1",
                            "--speculative-num-draft-tokens", "6", "--tp-size", "2", "--context-length", "8192"]
    assert "draft-min 2 dropped: SGLang has no minimum draft length" in out.notes
    assert any(n.startswith("SGLang runs MTP as EAGLE (NEXTN is its alias)") for n in out.notes)


def test_mtp_sglang_drafts_from_the_target_checkpoint(tmp_path):
    folder = tmp_path / "Qwen3.5-9B"
    folder.mkdir()
    out = export(spec_for("mtp", target=str(folder), target_repo=None), "sglang")
    assert out.argv[4] == str(folder)
    assert out.argv[out.argv.index("--speculative-draft-model-path") + 1] == str(folder)
    assert export(spec_for("mtp", target="deepseek-ai/DeepSeek-V4-Flash", target_repo=None), "vllm").argv[2] == \
        "deepseek-ai/DeepSeek-V4-Flash"


def _source_root(env: str, marker: str) -> Path:
    root = Path(os.environ.get(env, "/nonexistent"))
    if not (root / marker).is_file():
        pytest.skip(f"set {env} to an unpacked source tree holding {marker}")
    return root


def test_mtp_spellings_are_in_the_pinned_engine_sources():
    """SPECDEC_VLLM_SRC / SPECDEC_SGLANG_SRC: the unpacked vllm-0.34.0 / sglang-0.5.23 wheels
    (the folders holding vllm/ and sglang/)."""
    vllm = _source_root("SPECDEC_VLLM_SRC", "vllm/config/speculative.py")
    spec_py = (vllm / "vllm/config/speculative.py").read_text()
    mtp_types = spec_py.split("MTPModelTypes = Literal[", 1)[1].split("]", 1)[0]
    assert '"mtp",' in mtp_types and '"qwen3_5_mtp",' in mtp_types and '"deepseek_mtp",' in mtp_types
    assert "is deprecated and replaced with mtp" in spec_py
    assert "return target.model_weights or target.model" in \
        (vllm / "vllm/v1/worker/gpu/spec_decode/mtp/config.py").read_text()
    sglang = _source_root("SPECDEC_SGLANG_SRC", "sglang/srt/speculative/spec_info.py")
    assert "    EAGLE = auto()" in (sglang / "sglang/srt/speculative/spec_info.py").read_text()
    registry = (sglang / "sglang/srt/speculative/spec_registry.py").read_text()
    assert '_RESERVED_ALIASES = frozenset({"NEXTN"})' in registry
    assert '"Qwen3_5ForCausalLMMTP"' in (sglang / "sglang/srt/configs/model_config.py").read_text()


def test_cli_exports_an_mtp_pair(tmp_path):
    from test_cli import assert_one_line_error, specdec
    from tiny_memory_models import write_qwen35_gguf

    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "HF_HUB_CACHE": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    target = write_qwen35_gguf(tmp_path / "Qwen3.5-9B-mtp.gguf", nextn=1)
    proc = specdec("export", "--to", "llama-server", "--pair", "mtp-qwen3.5-9b", "-t", target, "-ngl", "99", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["llama-server", "-m", str(target), *EXPECTED[("llama-server", "mtp")][3:],
                                   "-ngl", "99"]
    assert "settings from the registry entry" in proc.stderr
    plain = write_qwen35_gguf(tmp_path / "Qwen3.5-9B.gguf")
    assert_one_line_error(specdec("export", "--to", "llama-server", "--pair", "mtp-qwen3.5-9b", "-t", plain, env=env),
                          1, "has none", "--no-mtp")
    # the pair's GGUF is not on this machine: llama-server needs a local file, said in one line
    assert_one_line_error(specdec("export", "--to", "llama-server", "--pair", "mtp-qwen3.5-9b", env=env),
                          1, "llama-server loads GGUF files", "pass the target's .gguf file")
    proc = specdec("export", "--to", "vllm", "--pair", "mtp-qwen3.5-9b", "--target-repo", Q35_REPO, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["method"] == "mtp" and got["argv"] == EXPECTED[("vllm", "mtp")]


# --------------------------------------------------------------------------- the engines' own parsers


def _sglang_parser():
    pytest.importorskip("torch")
    server_args = pytest.importorskip("sglang.srt.server_args")
    import argparse

    parser = argparse.ArgumentParser(exit_on_error=False)
    server_args.ServerArgs.add_cli_args(parser)
    return parser


@pytest.mark.parametrize("method", METHODS)
def test_sglang_parser_accepts_the_output(method):
    parser = _sglang_parser()
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    out = export(spec_for(method, tensor_parallel=2, ctx=8192), "sglang")
    assert out.argv[:3] == ["python3", "-m", "sglang.launch_server"]
    args = parser.parse_args(out.argv[3:])
    assert args.model_path == out.argv[4] and args.tp_size == 2 and args.context_length == 8192
    assert SpeculativeAlgorithm.from_string(args.speculative_algorithm).name == args.speculative_algorithm
    assert args.speculative_num_draft_tokens == int(out.argv[out.argv.index("--speculative-num-draft-tokens") + 1])


def _vllm_parser(monkeypatch):
    monkeypatch.setenv("VLLM_TARGET_DEVICE", os.environ.get("VLLM_TARGET_DEVICE", "cpu"))
    pytest.importorskip("torch")
    cli_args = pytest.importorskip("vllm.entrypoints.common.cli_args")
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return cli_args.make_arg_parser(FlexibleArgumentParser())


@pytest.mark.parametrize("method", METHODS)
def test_vllm_parser_accepts_the_output(method, monkeypatch):
    parser = _vllm_parser(monkeypatch)
    import dataclasses
    from typing import get_args

    from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod

    out = export(spec_for(method, tensor_parallel=2, ctx=8192), "vllm")
    assert out.argv[:2] == ["vllm", "serve"]
    args = parser.parse_args(out.argv[2:])
    assert args.model_tag == out.argv[2]
    assert args.tensor_parallel_size == 2 and args.max_model_len == 8192
    config = args.speculative_config
    assert config == out.speculative_config
    assert config["method"] in get_args(SpeculativeMethod)
    assert set(config) <= {f.name for f in dataclasses.fields(SpeculativeConfig)}


def _llama_cpp_src() -> Path:
    root = Path(os.environ.get("SPECDEC_LLAMA_CPP_SRC",
                               Path.home() / ".cache/specdec-src/llama_cpp_python-0.3.36/vendor/llama.cpp"))
    if not (root / "common" / "arg.cpp").is_file():
        pytest.skip("llama.cpp sources not on this machine (set SPECDEC_LLAMA_CPP_SRC)")
    return root


@pytest.mark.parametrize("method", METHODS)
def test_llama_server_spellings_are_in_the_llama_cpp_source(method):
    root = _llama_cpp_src()
    arg_cpp = (root / "common" / "arg.cpp").read_text()
    spec_cpp = (root / "common" / "speculative.cpp").read_text()
    out = export(spec_for(method, gpu_layers=-1, ctx=4096), "llama-server")
    options = arg_cpp.split("add_opt(common_arg(")[1:]
    for flag in (a for a in out.argv[1:] if a.startswith("-")):
        # declared as an option name: {"-md", "--model-draft", ...}
        declared = [o for o in options if re.match(r'\s*\{[^}]*"' + re.escape(flag) + r'"', o)]
        assert declared, flag
        # and not one of the removed ones ("the argument has been removed", arg_removed(...))
        assert not any("arg_removed" in o for o in declared), flag
    spec_type = out.argv[out.argv.index("--spec-type") + 1]
    assert f'{{"{spec_type}",' in spec_cpp.replace(" ", "")


# --------------------------------------------------------------------------- a real llama-server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("method", ["draft", "ngram"])
def test_real_llama_server_starts_with_the_output(method, tiny_target, tiny_draft, tmp_path):
    binary = os.environ.get("SPECDEC_LLAMA_SERVER")
    if not binary or not Path(binary).is_file():
        pytest.skip("set SPECDEC_LLAMA_SERVER to a llama-server binary")
    spec = spec_for(method, target=str(tiny_target), draft=str(tiny_draft) if method == "draft" else None,
                    gpu_layers=0, ctx=256)
    out = export(spec, "llama-server")
    port = _free_port()
    log = tmp_path / "server.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([binary, *out.argv[1:], "--port", str(port), "--host", "127.0.0.1"],
                                stdout=fh, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"llama-server exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.3)
        else:
            pytest.fail(f"llama-server did not come up:\n{log.read_text()[-3000:]}")
        body = json.dumps({"prompt": "a b c a b c a b", "n_predict": 8, "temperature": 0}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 200
            assert "content" in json.loads(r.read())
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
