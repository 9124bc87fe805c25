"""The prompt sources: the Shakespeare corpus's passages and prompt files (``specdec.models.corpus``)."""
from __future__ import annotations

import pytest

from specdec.models import corpus


def test_held_out_passages_are_the_tragedies():
    """Hamlet opens the held-out set (the tragedies, in file order); the training plays are the other 34."""
    held, train = corpus.passages(held_out=True), corpus.passages(held_out=False)
    assert held[0] == "BERNARDO:\nWho's there?\n" and held[0] not in train[:100]
    assert len(train) > 4 * len(held) > 0
    for p in held[:300] + train[:300]:
        name, rest = p.split(":\n", 1)
        assert name and rest.endswith("\n") and 1 <= rest.count("\n") <= corpus.MAX_LINES and "**" not in p


def test_passages_are_the_callers_own_list():
    """The parsed corpus is kept once a process: a caller that changes its list changes no later call's."""
    first = corpus.passages(held_out=True)
    want = list(first)
    first.clear()
    assert corpus.passages(held_out=True) == want
    assert corpus.sample_passages(3, held_out=True, seed=5) == corpus.sample_passages(3, held_out=True, seed=5)


def test_sample_passages_are_distinct_and_bounded():
    got = corpus.sample_passages(40, held_out=True, seed=1)
    assert len(set(got)) == 40 and set(got) <= set(corpus.passages(held_out=True))
    assert got != corpus.sample_passages(40, held_out=True, seed=2)
    n = len(corpus.passages(held_out=True))
    with pytest.raises(ValueError, match=f"asked for {n + 1} passages; the corpus has {n}"):
        corpus.sample_passages(n + 1, held_out=True, seed=0)


def test_prompt_files_in_both_forms(tmp_path):
    text = tmp_path / "p.txt"
    text.write_text("ROMEO:\\nBut soft\n\nJULIET:\\nO Romeo\n", encoding="utf-8")
    assert corpus.read_prompts(text) == ["ROMEO:\nBut soft", "JULIET:\nO Romeo"]
    lines = tmp_path / "p.jsonl"
    lines.write_text('{"prompt": "a\\nb"}\n"c"\n', encoding="utf-8")
    assert corpus.read_prompts(lines) == ["a\nb", "c"]


@pytest.mark.parametrize("name, body, message", [
    ("missing.txt", None, "does not exist"),
    ("a-directory", "dir", "is a directory, expected a file"),     # was "does not exist"
    ("empty.txt", "\n \n", "holds no prompts"),
    ("bad.jsonl", '{"prompt": "a"}\n{"prompt": "b"\n', r"bad.jsonl:2: not JSON \(Expecting"),
    ("key.jsonl", '{"text": "hi"}\n', r'key.jsonl:1: a JSON object needs a "prompt" key, got keys \[\'text\'\]'),
    ("number.jsonl", '{"prompt": 5}\n', "number.jsonl:1: a prompt must be non-empty text, got 5"),
    ("blank.jsonl", '""\n', "blank.jsonl:1: a prompt must be non-empty text, got ''"),
    ("latin1.txt", b"caf\xe9\n", "is not UTF-8 text"),
])
def test_a_bad_prompt_file_names_the_file_and_line(tmp_path, name, body, message):
    path = tmp_path / name
    if body == "dir":
        path.mkdir()
    elif isinstance(body, bytes):
        path.write_bytes(body)
    elif body is not None:
        path.write_text(body, encoding="utf-8")
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        corpus.read_prompts(path)
