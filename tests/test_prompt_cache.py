"""The prompt cache (``engine/promptcache``): a long prompt's cells restored from RAM or disk
give the same output as reading the prompt, in every layout of the context and after a
restart; files that fail their checks are refused and the prompt read again; a full disk or an
unusable folder costs the saving, never the serving; a kill mid-write leaves nothing that
loads; the cap holds."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from specdec_cli.engine.decode.engine import Engine
from specdec_cli.engine.decode.jobs import Job
from specdec_cli.engine.options import EngineOptions, GenOptions
from specdec_cli.engine.promptcache import disk as disk_module
from specdec_cli.engine.promptcache.cache import MIN_TOKENS, PromptCache, open_cache
from specdec_cli.engine.promptcache.disk import DiskTier, cache_files
from specdec_cli.engine.promptcache.entry_file import SUFFIX, entry_name, write_entry
from specdec_cli.engine.promptcache.key import CacheKey
from specdec_cli.serve.request_log import line
from test_cli import EXACT as CLI_EXACT
from test_cli import specdec

EXACT = dict(flash_attn="off", cache_type_k="f32", cache_type_v="f32")
TEXT = "the cat and the dog went to a place where the bird sang " * 16  # about 600 tokens here
GEN = GenOptions(max_tokens=24)


def _cache(model, folder, notes: list[str], cap: int = 1 << 30) -> PromptCache:
    return open_cache(model, cache_type_k="f32", cache_type_v="f32", flash_attn="off", folder=folder,
                      disk_cap=cap, note=notes.append)


def _engine(model, folder, notes: list[str], layout: str = "one", *, cache: bool = True) -> Engine:
    n_seq = 1 if layout == "one" else 3
    eng = Engine(model, None, options=EngineOptions(n_ctx=1024, n_seq=n_seq, kv_streams=layout == "streams", **EXACT))
    if cache:
        eng.prompt_cache = _cache(model, folder, notes)
    return eng


def _generate(eng: Engine, prompt: list[int], layout: str):
    if layout == "one":
        return eng.generate(prompt, GEN, use_draft=False)
    (_, result), = eng.run_many([Job(0, prompt)], GEN, n_parallel=2, use_draft=False)
    return result


def _cold(model, prompt: list[int]):
    """The output read from scratch, with no cache at all."""
    eng = _engine(model, None, [], cache=False)
    try:
        return eng.generate(prompt, GEN, use_draft=False)
    finally:
        eng.close()


def _saved_run(model, folder, notes, prompt, layout="one"):
    """A first process: reads ``prompt`` (nothing to restore) and saves it, then ends."""
    eng = _engine(model, folder, notes, layout)
    try:
        first = _generate(eng, prompt, layout)
        assert first.stats.n_prompt_restored == 0
    finally:
        eng.close()  # the writes finish before it returns
    return first


@pytest.mark.parametrize(("saved_in", "restored_in"), [("one", "one"), ("streams", "one"), ("one", "streams"),
                                                         ("streams", "pool")])
def test_a_restarted_engine_restores_the_prompt_from_disk_with_the_same_output(tiny_target, tmp_path, saved_in,
                                                                                restored_in):
    notes: list[str] = []
    eng = _engine(tiny_target, None, [], cache=False)
    prompt = eng.tokenize_prompt(TEXT)
    eng.close()
    assert len(prompt) > 2 * MIN_TOKENS
    cold = _cold(tiny_target, prompt)
    _saved_run(tiny_target, tmp_path, notes, prompt, saved_in)
    assert len(list(tmp_path.glob("*/*" + SUFFIX))) == 1
    again = _engine(tiny_target, tmp_path, notes, restored_in)
    try:
        assert "1 prompt of this model" in again.prompt_cache.describe()
        got = _generate(again, prompt, restored_in)
        assert got.stats.restored_from == "disk"
        assert got.stats.n_prompt_restored == got.stats.n_prompt_reused == len(prompt) - 1
        assert got.tokens == cold.tokens and got.text == cold.text
        # a prompt that shares only a head of it restores that head and reads the rest
        other = prompt[: MIN_TOKENS + 40] + prompt[7:90]
        part = _generate(again, other, restored_in)
        assert part.stats.n_prompt_reused == MIN_TOKENS + 40
        assert part.tokens == _cold(tiny_target, other).tokens
    finally:
        again.close()
    assert notes == []


def test_a_conversation_evicted_from_the_cells_comes_back_from_memory(tiny_target, tmp_path):
    """Three sequences, one decoding at a time: four conversations push the first one's cells out,
    and its next turn restores them from host RAM, not by reading its prompt again."""
    notes: list[str] = []
    eng = _engine(tiny_target, None, notes, "streams")
    eng.prompt_cache = _cache(tiny_target, None, notes)  # memory only
    try:
        words = ["cat", "dog", "bird", "fish"]  # one more than the sequences
        convs = [eng.tokenize_prompt(f"a story of the {w} who went to a place " * 20) for w in words]
        sched = eng.scheduler(GEN, n_parallel=1, use_draft=False)
        sched.start()
        for i, conv in enumerate(convs):
            sched.submit(Job(i, conv))
        while sched.busy:
            sched.step()
        turn2 = convs[0] + eng.target_model.tokenize(" and then", add_special=False, parse_special=False)
        sched.submit(Job(9, turn2))
        (_, res), = _drain(sched)
        assert res.stats.restored_from == "host", res.stats.timeline
        assert res.stats.n_prompt_restored >= len(convs[0]) - 1
        assert res.tokens == _cold(tiny_target, turn2).tokens
    finally:
        eng.close()
    assert notes == []


def _drain(sched) -> list:
    done = []
    while sched.busy:
        done += sched.step()
    return done


# --- files that fail their checks --------------------------------------------------------------
@pytest.mark.parametrize("damage", ["truncated", "altered", "another model's"])
def test_a_damaged_or_foreign_file_is_refused_in_one_line_and_the_prompt_read_again(tiny_target, tmp_path, damage):
    notes: list[str] = []
    eng = _engine(tiny_target, None, [], cache=False)
    prompt = eng.tokenize_prompt(TEXT)
    eng.close()
    _saved_run(tiny_target, tmp_path, notes, prompt)
    (path,) = tmp_path.glob("*/*" + SUFFIX)
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        path.write_bytes(data[: len(data) - 1000])
    elif damage == "altered":
        data[-500] ^= 0xFF
        path.write_bytes(data)
    else:  # a file written under another key, put where this model's files are
        path.unlink()
        write_entry(path, key="0" * 24, model="other-model.gguf", tokens=np.asarray(prompt[:-1], dtype=np.int32),
                    cells=bytes(4096))
    again = _engine(tiny_target, tmp_path, notes)
    try:
        got = again.generate(prompt, GEN, use_draft=False)
    finally:
        again.close()
    assert got.stats.n_prompt_restored == 0 and got.stats.restored_from is None
    assert got.tokens == _cold(tiny_target, prompt).tokens
    refused = [n for n in notes if "refused" in n]
    assert len(refused) == 1 and "\n" not in refused[0], notes
    assert {"truncated": "truncated", "altered": "checksum", "another model's": "other-model.gguf"}[damage] in refused[0]
    # the refused file is gone, and the prompt, read again, was saved anew
    (saved,) = tmp_path.glob("*/*" + SUFFIX)
    assert DiskTier(tmp_path, again.prompt_cache.key, 1 << 30, notes.append).entries.keys() == {saved.name}


def test_a_full_disk_is_said_once_and_generation_goes_on(tiny_target, tmp_path, monkeypatch):
    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(disk_module, "write_entry", full)
    notes: list[str] = []
    eng = _engine(tiny_target, tmp_path, notes)
    try:
        prompts = [eng.tokenize_prompt(f"{w} " + TEXT) for w in ("one", "two", "three")]
        outs = [eng.generate(p, GEN, use_draft=False) for p in prompts]
        eng.prompt_cache.flush()
        assert len(eng.prompt_cache.host.entries) == 3  # still kept in memory
    finally:
        eng.close()
    assert [o.tokens for o in outs] == [_cold(tiny_target, p).tokens for p in prompts]
    assert len(notes) == 1 and "No space left on device" in notes[0] and "going on" in notes[0]
    assert not list(tmp_path.glob("*/*" + SUFFIX))


@pytest.mark.parametrize("folder", ["a file", "writable by others"])
def test_an_unusable_folder_keeps_prompts_in_memory_with_a_note(tiny_target, tmp_path, folder):
    where = tmp_path / "cache"
    if folder == "a file":
        where.write_text("not a folder")
    else:
        where.mkdir()
        where.chmod(0o777)
    notes: list[str] = []
    cache = _cache(tiny_target, where, notes)
    assert cache.disk is None and "in memory only" in cache.describe()
    assert len(notes) == 1 and "prompts are kept in memory only" in notes[0]
    if folder != "a file":
        assert "other users" in notes[0]


def test_a_write_killed_mid_way_leaves_nothing_that_loads(tmp_path):
    key = CacheKey(model="m.gguf", model_id="1:ab", build="b", kv="k")
    folder = tmp_path / key.digest
    folder.mkdir(mode=0o700)
    target = folder / ("0" * 32 + SUFFIX)
    code = ("import os, sys, time\nimport numpy as np\nfrom pathlib import Path\n"
            "from specdec_cli.engine.promptcache.entry_file import write_entry\n"
            "os.fsync = lambda fd: time.sleep(600)  # the bytes written, not yet on the disk nor renamed\n"
            "write_entry(Path(sys.argv[1]), key=sys.argv[2], model='m.gguf', tokens=np.arange(300, dtype=np.int32),"
            " cells=bytes(32 << 20))\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(target), key.digest])
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not any(p.stat().st_size > 32 << 20 for p in folder.glob(".*.tmp")):
            time.sleep(0.05)
        assert list(folder.glob(".*.tmp")), "the writer never got going"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    notes: list[str] = []
    tier = DiskTier(tmp_path, key, 1 << 30, notes.append)
    assert tier.entries == {} and notes == []
    assert not list(folder.iterdir())  # the dead writer's temporary file is swept too


def test_files_are_the_owners_alone(tiny_target, tmp_path):
    notes: list[str] = []
    eng = _engine(tiny_target, None, [], cache=False)
    prompt = eng.tokenize_prompt(TEXT)
    eng.close()
    _saved_run(tiny_target, tmp_path / "c", notes, prompt)
    (path,) = (tmp_path / "c").glob("*/*" + SUFFIX)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700 and (tmp_path / "c").stat().st_mode & 0o777 == 0o700
    assert b"pickle" not in path.read_bytes()[:64]


# --- the tiers' bookkeeping, on cells that are only bytes ----------------------------------------
def _fake(tmp_path, disk_cap: int, host_cap: int, notes: list[str]) -> PromptCache:
    key = CacheKey(model="m.gguf", model_id="1:ab", build="b", kv="k")
    return PromptCache(key, folder=tmp_path, disk_cap=disk_cap, host_cap=host_cap, note=notes.append)


def test_the_caps_hold_under_ten_times_their_size(tmp_path):
    entry = 100_000
    notes: list[str] = []
    cache = _fake(tmp_path, disk_cap=3 * entry + 50_000, host_cap=2 * entry + 10, notes=notes)
    rng = np.random.default_rng(0)
    for i in range(33):  # ten times what the disk holds
        tokens = rng.integers(0, 1000, size=MIN_TOKENS + i).tolist()
        assert cache.offer(tokens, lambda i=i: bytes([i]) * entry)
        cache.flush()
        on_disk = sum(p.stat().st_size for p in tmp_path.glob("*/*" + SUFFIX))
        assert on_disk <= cache.disk.cap and cache.host.n_bytes <= cache.host.cap
    assert len(list(tmp_path.glob("*/*" + SUFFIX))) == 3 and len(cache.host.entries) == 2
    cache.close()
    assert notes == []


def test_a_longer_turn_replaces_its_prefix_and_the_longest_prefix_wins(tmp_path):
    notes: list[str] = []
    cache = _fake(tmp_path, disk_cap=1 << 30, host_cap=1 << 30, notes=notes)
    system = list(range(1, 301))
    turn1 = system + list(range(1000, 1400))
    turn2 = turn1 + list(range(2000, 2300))
    other = system + list(range(5000, 5400))
    assert cache.offer(turn1, lambda: b"1" * 10)
    assert not cache.offer(turn1[:-10], lambda: b"x")  # adds nothing: not kept
    assert cache.offer(turn2, lambda: b"2" * 10)
    assert cache.offer(other, lambda: b"3" * 10)
    cache.flush()
    assert len(cache.host.entries) == 2 and len(list(tmp_path.glob("*/*" + SUFFIX))) == 2  # turn1 went
    hit = cache.lookup(turn2 + [7, 7, 7], len(turn2) + 2, held=0)
    assert hit is not None and hit.n == len(turn2) and hit.tier == "host"
    assert cache.lookup(turn2 + [7], len(turn2), held=len(turn2) - MIN_TOKENS + 1) is None  # the cells hold enough
    # an entry longer than a sequence may hold is passed over: the next best shares the system prompt
    short = cache.lookup(turn2 + [7], len(turn2), held=0, room=len(turn2) - 1)
    assert short is not None and short.n == len(system) and short.name == entry_name(np.asarray(other, np.int32))
    hit = cache.lookup(system + [9] * 400, 700, held=0)
    assert hit is not None and hit.n == len(system)
    cache.close()
    restarted = _fake(tmp_path, disk_cap=1 << 30, host_cap=1 << 30, notes=notes)
    hit = restarted.lookup(other + [1], len(other), held=0)
    assert hit is not None and hit.tier == "disk" and hit.n == len(other)
    assert restarted.disk.load(hit.name) == b"3" * 10
    assert entry_name(np.asarray(other, dtype=np.int32)) == hit.name
    assert notes == []


# --- what a user sees ------------------------------------------------------------------------------
def test_the_request_line_and_metrics_say_which_tier_served(tmp_path):
    from specdec_cli.engine.stats import GenerationStats
    from specdec_cli.serve.metrics import _prompt_cache_metrics

    st = GenerationStats(n_prompt=6000, n_prompt_reused=5990, n_prompt_restored=5990, restored_from="disk")
    assert "prompt 6,000 (5,990 cached, 5,990 from disk)" in line("POST", "/v1/chat/completions",
                                                                 {"status": 200, "stats": st}, 1.0)
    cache = _fake(tmp_path, disk_cap=1 << 30, host_cap=1 << 30, notes=[])
    cache.served.hits["disk"], cache.served.tokens["disk"] = 1, 5990
    families = {f.name: f for f in _prompt_cache_metrics(cache)}
    hits = {s.labels["tier"]: s.value for s in families["specdec_prompt_cache_hits"].samples}
    assert hits == {"disk": 1, "host": 0}
    assert {s.labels["tier"] for s in families["specdec_prompt_cache_bytes"].samples} == {"host", "disk"}
    cache.close()


def test_the_cache_command_lists_and_empties(tiny_target, tmp_path):
    folder = tmp_path / "prompts"
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text(TEXT)
    args = ["-t", tiny_target, "--no-draft", "-n", "4", *CLI_EXACT[:6], "--prompt-cache", folder]
    run = specdec("run", "-f", prompt_file, *args)
    assert run.returncode == 0, run.stderr
    listed = specdec("cache", "--prompt-cache", folder, "--json")
    assert listed.returncode == 0, listed.stderr
    shown = json.loads(listed.stdout)
    assert [e["model"] for e in shown["entries"]] == [tiny_target.name] and not shown["entries"][0]["damaged"]
    again = json.loads(specdec("run", "-f", prompt_file, *args, "--json").stdout)  # a new process: from disk
    assert again["restored_from"] == "disk" and again["n_prompt_restored"] > MIN_TOKENS
    cleared = specdec("cache", "--clear", "--prompt-cache", folder)
    assert cleared.returncode == 0 and "emptied (1 file" in cleared.stderr and cleared.stdout == ""
    assert not list(folder.glob("*/*" + SUFFIX))
    off = specdec("run", "-f", prompt_file, *args[:-2], "--no-prompt-cache", "--prompt-cache", folder)
    assert off.returncode == 0 and not list(folder.glob("*/*" + SUFFIX))
    bad = specdec("run", "-f", prompt_file, *args, "--prompt-cache-size", "lots")
    assert bad.returncode == 2 and "--prompt-cache-size 'lots' is not a size" in bad.stderr


def test_sizes_read_as_a_user_writes_them():
    from specdec_cli.commands.loading import byte_size

    assert byte_size("10G", "x") == 10 << 30 and byte_size("500M", "x") == 500 << 20
    assert byte_size("1.5GiB", "x") == int(1.5 * (1 << 30)) and byte_size("4096", "x") == 4096


def test_a_prompt_ends_apart_where_the_curve_says_that_pass_is_cheap(tiny_target, tmp_path):
    """A long prompt's last token goes in a pass of its own (as after a restore: the same shape,
    the same logits) where one pass is at most 2% of reading it: on a CPU-like curve from a few
    hundred tokens, on a GPU-like one only for long prompts; never without a cache."""
    from specdec_cli.engine.policy.costmodel import CostModel

    eng = _engine(tiny_target, tmp_path, [], "streams")
    try:
        sched = eng.scheduler(GEN, n_parallel=2, use_draft=False)
        sched.costs = CostModel({1: 0.04, 512: 5.0}, frozen=True)  # a CPU: a step against 512 rows' 5 s
        assert sched._ends_apart(MIN_TOKENS) and not sched._ends_apart(MIN_TOKENS - 1)
        sched.costs = CostModel({1: 0.005, 512: 0.05}, frozen=True)  # a GPU: 512 rows for ten steps
        assert not sched._ends_apart(2048) and sched._ends_apart(2560)
        sched.costs = None
        assert sched._ends_apart(MIN_TOKENS)
        sched.admission.cache = None
        assert not sched._ends_apart(5000)
    finally:
        eng.close()


def test_a_file_is_read_off_the_engine_thread_while_a_neighbour_decodes(tiny_target, tmp_path):
    """A prompt whose head is on disk waits while its file is read on a thread of its own; the
    sequence already decoding goes on in the meantime; then the prompt restores it from memory,
    counted as the disk's, and answers as a cold read does. One cancelled while it waits ends
    as cancelled."""
    notes: list[str] = []
    eng = _engine(tiny_target, None, [], cache=False)
    prompt = eng.tokenize_prompt(TEXT)
    other = eng.tokenize_prompt("a story of the fish who went to a place " * 4)
    eng.close()
    _saved_run(tiny_target, tmp_path, notes, prompt)
    eng = _engine(tiny_target, tmp_path, notes, "streams")
    try:
        sched = eng.scheduler(GenOptions(max_tokens=200), n_parallel=2, use_draft=False)
        sched.start()
        sched.submit(Job(0, other))
        sched.step()  # the neighbour reads its prompt and decodes from here on
        sched.submit(Job(1, prompt, gen=GEN))
        gone = Job(2, prompt, gen=GEN)
        sched.submit(gone)
        sched.step()
        assert [j.index for j, _ in sched.admission.loading] == [1, 2]  # both wait for the one file
        gone.cancelled = True
        done = dict((j.index, r) for j, r in _drain(sched))
    finally:
        eng.close()
    assert done[2].stats.stop_reason == "cancelled"
    assert done[1].stats.restored_from == "disk" and done[1].stats.n_prompt_restored == len(prompt) - 1
    assert done[1].tokens == _cold(tiny_target, prompt).tokens
    assert eng.prompt_cache.served.hits == {"host": 0, "disk": 1}
    assert notes == []


def test_a_folder_given_by_mistake_loses_nothing_that_is_not_the_caches(tmp_path):
    """Only the names the cache makes are read, swept or deleted: a user's own ``*.kv`` files and
    hidden ``.tmp`` files two levels down stay, whatever the cap or ``--clear`` does."""
    mine = [tmp_path / "notes" / "keys.kv", tmp_path / "work" / ".draft.1.tmp"]
    for f in mine:
        f.parent.mkdir(mode=0o700)
        f.write_bytes(b"mine" * 1000)
    cache = _fake(tmp_path, disk_cap=100, host_cap=1 << 20, notes=[])  # every write makes room
    assert cache.offer(list(range(MIN_TOKENS)), lambda: b"x" * 10)
    assert cache.offer(list(range(1, MIN_TOKENS + 1)), lambda: b"y" * 10)
    cache.close()
    assert len(cache_files(tmp_path)) == 1  # the cap made room among the cache's own files
    assert specdec("cache", "--clear", "--prompt-cache", tmp_path).returncode == 0
    assert all(f.read_bytes() == b"mine" * 1000 for f in mine)
