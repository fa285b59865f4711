"""Where prompts come from, when it goes wrong: undecodable bytes, unreadable files, bad
--batch lines, empty prompts. Every case is one foreseen error (exit 2) that says what to do,
found before any model is loaded."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec_cli.cli import main
from specdec_cli.errors import EXIT_USAGE, UsageError
from specdec_cli.terminal.prompts import MAX_LISTED, read_batch, read_prompt

ROOT = Path(__file__).resolve().parents[1]


class TextStdin(io.StringIO):
    """A text-mode stdin without ``.buffer`` (what tests and some embedders pass)."""

    def __init__(self, text, tty=False):
        super().__init__(text)
        self._tty = tty

    def isatty(self):
        return self._tty


class BinaryStdin:
    """Like ``sys.stdin``: a text stream whose bytes are on ``.buffer``. Reading the text
    side is a failure: the bytes must be what is decoded."""

    def __init__(self, data: bytes, tty=False):
        self.buffer = io.BytesIO(data)
        self._tty = tty

    def isatty(self):
        return self._tty

    def read(self):  # pragma: no cover - reading here would be the bug
        raise AssertionError("stdin must be read as bytes, through .buffer")


def usage(fn, *args, **kw) -> UsageError:
    with pytest.raises(UsageError) as info:
        fn(*args, **kw)
    err = info.value
    assert err.exit_code == EXIT_USAGE
    assert "\n" not in err.one_line(), err.one_line()
    return err


# --- 1. one decoding path --------------------------------------------------------------------


def test_non_utf8_bytes_on_stdin_are_refused_cleanly():
    err = usage(read_prompt, None, None, BinaryStdin(b"\xff\xfe hi"))
    assert "stdin is not UTF-8 text (first bad byte at offset 0)" in str(err)
    assert "iconv -f latin1 -t utf-8" in err.hint


def test_the_offset_and_line_of_the_first_bad_byte_are_given():
    err = usage(read_prompt, None, None, BinaryStdin(b"line one\ncaf\xe9 x"))
    assert str(err) == "stdin is not UTF-8 text (first bad byte at offset 12, line 2)"
    assert str(usage(read_prompt, None, None, BinaryStdin(b"ok \x80"))) == "stdin is not UTF-8 text (first bad byte at offset 3)"


def test_stdin_is_read_as_bytes_and_decoded_as_utf8():
    assert read_prompt(None, None, BinaryStdin("héllo wörld".encode("utf-8"))) == "héllo wörld"


def test_a_text_stdin_holding_surrogate_escapes_gets_the_same_error():
    # what Python's text stdin gives for undecodable bytes under errors="surrogateescape"
    err = usage(read_prompt, None, None, TextStdin(b"\xff\xfe hi".decode("utf-8", "surrogateescape")))
    assert "stdin is not UTF-8 text (first bad byte at offset 0)" in str(err)


def test_a_prompt_argument_with_lone_surrogates_is_refused():
    arg = b"caf\xe9".decode("utf-8", "surrogateescape")  # how Python hands over undecodable argv bytes
    err = usage(read_prompt, arg, None, TextStdin(""))
    assert "the prompt argument is not UTF-8 text (first bad byte at offset 3)" in str(err)


def test_a_non_utf8_file_names_the_flag_the_offset_and_iconv(tmp_path):
    f = tmp_path / "latin1.txt"
    f.write_bytes("café".encode("latin1"))
    err = usage(read_prompt, None, f, TextStdin(""))
    assert str(err).startswith(f"-f {f} is not UTF-8 text (first bad byte at offset 3)")
    assert "iconv -f latin1 -t utf-8" in err.hint and str(f) in err.hint
    b = tmp_path / "latin1.jsonl"
    b.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    err = usage(read_batch, b)
    assert f"--batch {b} is not UTF-8 text (first bad byte at offset 32, line 2)" in str(err)
    assert "iconv" in err.hint


def test_stdin_and_a_file_with_the_same_bad_bytes_get_the_same_kind_of_error(tmp_path):
    f = tmp_path / "p.txt"
    f.write_bytes(b"\xff\xfe hi")
    from_file = str(usage(read_prompt, None, f, TextStdin("")))
    from_stdin = str(usage(read_prompt, None, None, BinaryStdin(b"\xff\xfe hi")))
    assert from_file.split(" is not UTF-8 text ")[1] == from_stdin.split(" is not UTF-8 text ")[1]


def test_a_utf8_bom_is_dropped_from_files_and_stdin(tmp_path):
    f = tmp_path / "bom.txt"
    f.write_bytes(b"\xef\xbb\xbfhello")
    assert read_prompt(None, f, TextStdin("")) == "hello"
    assert read_prompt(None, None, BinaryStdin(b"\xef\xbb\xbfhello")) == "hello"
    assert read_prompt(None, None, TextStdin("\ufeffhello")) == "hello"
    b = tmp_path / "bom.jsonl"
    b.write_bytes(b'\xef\xbb\xbf{"prompt": "a"}\n{"prompt": "b"}\n')
    assert [i.text for i in read_batch(b)] == ["a", "b"]  # not "invalid JSON" on line 1
    b.write_bytes(b"\xef\xbb\xbfplain\n")
    assert [i.text for i in read_batch(b)] == ["plain"]


def test_a_json_escape_for_a_lone_surrogate_is_a_bad_line(tmp_path):
    b = tmp_path / "s.jsonl"
    b.write_text('{"prompt": "a \\ud800 b"}\n{"messages": [{"role": "user", "content": "\\udcff"}]}\n')
    err = str(usage(read_batch, b))
    assert f"{b}:1: 'prompt' holds a lone surrogate (\\ud800)" in err
    assert f"{b}:2: messages[0] content holds a lone surrogate (\\udcff)" in err


# --- 2. file errors say what to do -----------------------------------------------------------


def _via_f(path):
    return read_prompt(None, path, TextStdin(""))


READERS = [pytest.param(_via_f, "-f", id="-f"), pytest.param(read_batch, "--batch", id="--batch")]


@pytest.mark.parametrize("reader, flag", READERS)
def test_a_missing_file(tmp_path, reader, flag):
    err = usage(reader, tmp_path / "missing.txt")
    assert str(err) == f"{flag} {tmp_path / 'missing.txt'}: no such file"
    assert "check the path" in err.hint


@pytest.mark.parametrize("reader, flag", READERS)
def test_a_relative_missing_path_says_where_it_was_looked_for(tmp_path, monkeypatch, reader, flag):
    monkeypatch.chdir(tmp_path)
    err = usage(reader, Path("nope.txt"))
    assert str(err) == f"{flag} nope.txt: no such file" and str(tmp_path) in err.hint


@pytest.mark.parametrize("reader, flag", READERS)
def test_a_directory(tmp_path, reader, flag):
    err = usage(reader, tmp_path)
    assert str(err) == f"{flag} {tmp_path}: is a directory, not a file" and err.hint


@pytest.mark.parametrize("reader, flag", READERS)
def test_permission_denied(tmp_path, monkeypatch, reader, flag):
    f = tmp_path / "secret.txt"
    f.write_text("hi")

    def denied(self, *args, **kw):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "open", denied)  # chmod 000 would not stop root
    err = usage(reader, f)
    assert str(err) == f"{flag} {f}: permission denied"
    assert "permissions" in err.hint and str(f) in err.hint


@pytest.mark.parametrize("reader, flag", READERS)
def test_other_os_errors_name_the_file_and_the_reason(tmp_path, monkeypatch, reader, flag):
    loop = tmp_path / "loop"
    os.symlink(loop, loop)  # ELOOP, for real
    err = usage(reader, loop)
    assert str(err).startswith(f"{flag} {loop}: cannot read it (") and os.strerror(errno.ELOOP) in str(err)

    def eio(self, *args, **kw):
        raise OSError(errno.EIO, os.strerror(errno.EIO), str(self))

    f = tmp_path / "disk.txt"
    f.write_text("hi")
    monkeypatch.setattr(Path, "open", eio)
    err = usage(reader, f)
    assert str(err) == f"{flag} {f}: cannot read it ({os.strerror(errno.EIO)})" and err.hint


def test_an_unreadable_stdin_is_one_error():
    class Broken(BinaryStdin):
        def __init__(self):
            super().__init__(b"")
            self.buffer = self

        def read(self):
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    err = usage(read_prompt, None, None, Broken())
    assert str(err) == f"cannot read stdin ({os.strerror(errno.EIO)})" and err.hint


# --- 3. --batch: the whole file is checked, every bad line listed ----------------------------


def write(tmp_path, *lines, name="b.jsonl"):
    f = tmp_path / name
    f.write_text("".join(line + "\n" for line in lines))
    return f


def test_every_bad_line_is_listed_with_its_number(tmp_path):
    f = write(
        tmp_path,
        '{"prompt": "fine"}',
        '{"prompt": "x"',
        '{"id": 3}',
        "plain text is fine",
        '{"prompt": ""}',
        '{"messages": [{"role": "human", "content": "hi"}]}',
    )
    err = usage(read_batch, f)
    msg = str(err)
    assert msg.startswith(f"--batch {f} has 4 bad lines: ")
    assert f"{f}:2: invalid JSON" in msg
    assert f"{f}:3: needs a 'prompt' string or a 'messages' list" in msg
    assert f"{f}:5: the prompt is empty" in msg
    assert f"{f}:6: messages[0] has role \"human\"" in msg and "system, user, assistant, tool" in msg
    assert f"{f}:1:" not in msg and f"{f}:4:" not in msg
    assert msg.index(":2:") < msg.index(":3:") < msg.index(":5:") < msg.index(":6:")
    assert '{"prompt": ' in err.hint and '{"messages": [{"role": "user", "content": "hi"}]}' in err.hint


def test_the_list_stops_at_a_limit(tmp_path):
    f = write(tmp_path, *(['{"prompt": 1}'] * (MAX_LISTED + 5)))
    msg = str(usage(read_batch, f))
    assert msg.startswith(f"--batch {f} has {MAX_LISTED + 5} bad lines: ")
    assert f"{f}:{MAX_LISTED}:" in msg and f"{f}:{MAX_LISTED + 1}:" not in msg
    assert msg.endswith("; and 5 more")


def test_a_single_bad_line_is_named_by_file_and_line(tmp_path):
    f = write(tmp_path, '{"prompt": "a"}', '{"prompt": 3}')
    err = usage(read_batch, f)
    assert str(err) == f"{f}:2: needs a 'prompt' string or a 'messages' list ('prompt' is a number)"
    assert '{"prompt": ' in err.hint


@pytest.mark.parametrize("prompt", ["", "   ", "\\n\\t "])
def test_an_empty_or_blank_json_prompt_is_a_bad_line(tmp_path, prompt):
    f = write(tmp_path, '{"prompt": "ok"}', '{"prompt": "%s", "id": 7}' % prompt)
    assert str(usage(read_batch, f)) == f"{f}:2: the prompt is empty"


def test_blank_plain_lines_separate_prompts(tmp_path):
    f = write(tmp_path, "first", "   ", "", "\t", "second")
    assert [i.text for i in read_batch(f)] == ["first", "second"]


def test_a_file_of_blank_lines_holds_no_prompts(tmp_path):
    f = write(tmp_path, "  ", "")
    err = usage(read_batch, f)
    assert str(err) == f"--batch {f} holds no prompts" and '{"prompt": ' in err.hint


@pytest.mark.parametrize(
    "line, why",
    [
        ('{"messages": []}', "'messages' is an empty list"),
        ('{"messages": "hi"}', "'messages' must be a list of {role, content} objects, not a string"),
        ('{"messages": ["hi"]}', "messages[0] is a string, not a {role, content} object"),
        ('{"messages": [{"content": "hi"}]}', "messages[0] has no 'role'"),
        ('{"messages": [{"role": "user"}]}', "messages[0] has no 'content'"),
        ('{"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]}',
         'messages[1] has role "bot"; use one of system, user, assistant, tool'),
        ('{"messages": [{"role": "user", "content": 5}]}', "messages[0] 'content' must be a string, not a number"),
        ('{"messages": [{"role": "user", "content": null}]}', "messages[0] 'content' must be a string, not null"),
        ('{"messages": [{"role": "user", "content": {"text": "a"}}]}',
         "messages[0] 'content' must be a string, not an object"),
        ('{"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "  "}]}',
         "the prompt is empty (every message's content is empty)"),
        ('{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}',
         'messages[0] content[0] is a part of type "image_url"; only text parts are supported'),
        ('{"messages": [{"role": "user", "content": [{"type": "text"}]}]}', "messages[0] content[0] needs a 'text' string"),
        ('{"messages": [{"role": "user", "content": [3]}]}', "messages[0] content[0] is a number, not a text part"),
        ('{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}', "has both 'prompt' and 'messages'"),
        ('[{"role": "user", "content": "hi"}]', "a JSON array, not an object"),
        ('{"prompt": ["a"]}', "('prompt' is a list)"),
    ],
)
def test_bad_message_lines(tmp_path, line, why):
    f = write(tmp_path, '{"prompt": "fine"}', line)
    err = usage(read_batch, f)
    assert str(err).startswith(f"{f}:2: ") and why in str(err), str(err)
    assert '{"messages": [{"role": "user", "content": "hi"}]}' in err.hint


def test_all_four_roles_are_accepted(tmp_path):
    msgs = [{"role": r, "content": r} for r in ("system", "user", "assistant", "tool")]
    f = write(tmp_path, json.dumps({"messages": msgs}))
    assert read_batch(f)[0].messages == msgs


def test_openai_text_parts_are_flattened_to_a_string(tmp_path):
    content = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}, {"text": "third"}]
    f = write(tmp_path, json.dumps({"messages": [{"role": "user", "content": content}], "id": "x"}))
    (item,) = read_batch(f)
    assert item.messages == [{"role": "user", "content": "first\nsecond\nthird"}] and item.id == "x"


def test_a_json_scalar_in_a_jsonl_file_is_a_bad_line_but_plain_text_stays_text(tmp_path):
    f = write(tmp_path, '{"prompt": "a"}', '"just a string"', "42")
    msg = str(usage(read_batch, f))
    assert f"{f}:2: a string in JSON, not an object" in msg and f"{f}:3: a number in JSON, not an object" in msg
    g = write(tmp_path, '"quoted" is fine here', "42", "null", name="plain.txt")
    assert [i.text for i in read_batch(g)] == ['"quoted" is fine here', "42", "null"]


# --- 4. blank prompts are "the prompt is empty" everywhere ----------------------------------


@pytest.mark.parametrize("blank", ["", "   ", "\n\t \n"])
def test_a_blank_prompt_from_any_source_is_empty(tmp_path, blank):
    f = tmp_path / "p.txt"
    f.write_text(blank)
    for args in ((blank, None, TextStdin("")), (None, f, TextStdin("")), (None, None, BinaryStdin(blank.encode())),
                 (None, None, TextStdin(blank))):
        err = usage(read_prompt, *args)
        assert str(err).startswith("the prompt is empty") and err.hint
    assert f"-f {f}" in str(usage(read_prompt, None, f, TextStdin("")))


# --- through the CLI: exit 2, one line, no traceback, before any model ---------------------


def one_error_line(capsys) -> str:
    out = capsys.readouterr()
    assert "Traceback" not in out.err and out.out == ""
    lines = [ln for ln in out.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out.err
    return lines[0]


def test_cli_lists_the_bad_batch_lines_before_loading_a_model(tmp_path, capsys):
    f = write(tmp_path, '{"prompt": ""}', "ok", '{"messages": [{"role": "user", "content": 1}]}', "{")
    assert main(["run", "-t", str(tmp_path / "x.gguf"), "--batch", str(f)]) == EXIT_USAGE
    line = one_error_line(capsys)
    assert f"has 3 bad lines: {f}:1: the prompt is empty; {f}:3: " in line and f"{f}:4: invalid JSON" in line
    assert "x.gguf" not in line  # the target was never looked at


@pytest.mark.parametrize("make", ["missing", "dir", "latin1"])
def test_cli_file_errors(tmp_path, capsys, make):
    f = tmp_path / "p.txt"
    if make == "dir":
        f.mkdir()
    elif make == "latin1":
        f.write_bytes("résumé".encode("latin1"))
    for flag in ("-f", "--batch"):
        assert main(["run", "-t", str(tmp_path / "x.gguf"), flag, str(f)]) == EXIT_USAGE
        line = one_error_line(capsys)
        assert line.startswith(f"error: {flag} {f}")
        assert {"missing": "no such file", "dir": "is a directory", "latin1": "is not UTF-8 text"}[make] in line


def test_cli_non_utf8_argument(tmp_path, capsys):
    arg = b"\xff\xfe bad".decode("utf-8", "surrogateescape")
    assert main(["run", "-t", str(tmp_path / "x.gguf"), arg]) == EXIT_USAGE
    assert "the prompt argument is not UTF-8 text (first bad byte at offset 0)" in one_error_line(capsys)


def test_cli_non_utf8_stdin(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "specdec_cli", "run", "-t", str(tmp_path / "nonexistent.gguf")],
        input=b"\xff\xfe bad", capture_output=True, cwd=ROOT, timeout=120,
        env={**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)},
    )
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == EXIT_USAGE, err
    assert "Traceback" not in err and proc.stdout == b""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "stdin is not UTF-8 text (first bad byte at offset 0)" in lines[0], err
    assert "iconv" in lines[0]
