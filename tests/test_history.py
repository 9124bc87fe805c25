"""Product code says what it does, in the present tense: no dates and no before/after narration in its prose.

The prose of a product source file is what a reader takes for documentation: Python comments and docstrings
(every bare string statement), C++ and Verilog comments. String literals a program prints (error messages, help
texts) are not read here. Measurements and the story of a change belong in docs/status.md and
docs/benchmarks.md, with their dates; see README.md.

Each pattern of :data:`PATTERNS` matches one narrative form precisely, so that present-tense prose ("the token
before it", "the value the register had at reset", "pages freed from now on") stays clear of it; the synthetic
cases below show both sides of every pattern.
"""
from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: What ``pip install`` ships: the contract, the MyHDL blocks, the golden models and C++ references, the runtime.
PRODUCT = ("hwcontract", "fpga", "hls_ref", "host/specdec")

#: Source files whose prose is read: Python, C++ (sources and headers), Verilog and Verilator control files.
SUFFIXES = {".py": "python", ".cpp": "c", ".h": "c", ".v": "c", ".vlt": "c"}

_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?"
          r"|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
_YEAR = r"(?:19|20)\d\d"
#: A time figure: a number and its unit.
_TIME = r"\d[\d.,]*\s*(?:ms|s|µs|us|ns|min|h)\b"
#: A figure with a unit of time, throughput, area or rate (what a before/after comparison reports).
_FIGURE = (r"\d[\d.,]*\s*(?:%|x\b|ms\b|s\b|µs\b|us\b|ns\b|min\b|h\b|[MG]Hz\b|[MG]B/s\b|LUTs?\b|FFs?\b|DSPs?\b"
           r"|BRAMs?\b|RAMB\d*\b|tok/s\b|tokens?\b)")
#: Past participles "had" takes in narration (regular ones end in -ed, matched apart).
_PARTICIPLES = ("been|made|run|drawn|done|gone|put|set|kept|left|read|sent|built|lost|hit|cut|said|shown|seen|known"
                "|thrown|told|found|come|become|begun|got|gotten|held|brought|thought|caught|meant|spent|paid|led|fed"
                "|won|split|let|taken|given|written|chosen|broken|driven|fallen|forgotten|frozen|hidden|risen|proven"
                "|stolen|beaten|bitten")

#: name -> (pattern, what it catches). Matched over a whole comment block or docstring, so a form may span lines.
PATTERNS: dict[str, tuple[re.Pattern, str]] = {
    "iso date": (re.compile(rf"\b{_YEAR}-(?:0[1-9]|1[0-2])(?:-(?:0[1-9]|[12]\d|3[01]))?\b"),
                 "an ISO date or month (2026-11-28, 2026-11)"),
    "slash date": (re.compile(rf"\b(?:\d{{1,2}}/\d{{1,2}}/{_YEAR}|{_YEAR}/\d{{1,2}}/\d{{1,2}})\b"),
                   "a date with slashes (28/11/2026, 2026/11/28)"),
    "month date": (re.compile(rf"\b{_MONTH}\.?\s+(?:\d{{1,2}}(?:st|nd|rd|th)?|{_YEAR})\b"
                              rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH}\b"),
                   "a month and a day or year (Nov 28, 28 November, November 2026)"),
    "year marker": (re.compile(r"(?i)\b(?:as of|since|until|till|before|after|in early|in late)\s+20[0-3]\d\b"
                               r"(?![.,]?\d)"),
                    "a point in time given by its year (before 2026, as of 2025)"),
    "had done": (re.compile(rf"(?i)\bhad\s+(?:not\s+|never\s+|only\s+|already\s+|always\s+)?"
                            rf"(?:{_PARTICIPLES}|\w+[^e\W]ed)\b"),
                 "what the code had done (had raised, had been, had taken)"),
    "used to": (re.compile(r"(?i)\b(?:it|this|that|which|they|we|there|code|core|driver|model|kernel|loop)"
                           r"\s+used\s+to\b|\bused\s+to\s+be\b"),
                "what the code used to do"),
    "no longer": (re.compile(r"(?i)\bno\s+longer\b"), "what the code no longer does"),
    "previously": (re.compile(r"(?i)\b(?:previously|formerly|hitherto)\b"), "previously, formerly"),
    "the fix": (re.compile(r"(?i)\b(?:before|after|until|since|without)\s+(?:the|this|that|a|its)\s+"
                           r"(?:fix|bug ?fix|change|patch|rewrite|refactor(?:ing)?|redesign|workaround)\b"),
                "before the fix, after this change"),
    "old version": (re.compile(r"(?i)\bthe\s+(?:old|earlier|previous|former|original)\s+(?:code|kernel|version"
                               r"|implementation|approach|scheme|design|layout|behaviou?r)\b"),
                    "the old code, the earlier kernel"),
    "was ... now": (re.compile(r"(?i)\b(?:was|were)\b(?:[^.;!?]|\.\d){0,80}?\bnow\b(?!\s+on\b)"),
                    "what was, and what is now"),
    "now instead": (re.compile(r"(?i)\bnow\b(?!\s+on\b)[^.;!?]{0,60}?\b(?:instead\s+of|where\s+(?:it|they)"
                               r"|rather\s+than|than\s+before)\b"),
                    "now X instead of Y, now X where it did Y"),
    "took": (re.compile(rf"(?i)\b(?:took|spent|lasted)\s+(?:about\s+|only\s+|nearly\s+|over\s+|under\s+|just\s+)?"
                        rf"{_FIGURE}|\btook\s+(?:[^\s;]+\s+){{1,3}}?as\b"),
             "what a run took (took 5.9 s, took 21 RAMB36) or what the code took a value as"),
    "was worst": (re.compile(r"(?i)\b(?:was|were)\s+(?:the\s+|its\s+)(?:[\w',-]+\s+){0,4}?"
                             r"(?:worst|critical|slowest|longest|bottleneck)\b|\b(?:was|were)\s+most\s+of\b"),
                  "what was the worst path or most of the time"),
    "(was X)": (re.compile(r"(?i)\(\s*(?:was|were|previously|formerly)\s"), "a former value in parentheses"),
    "figure arrow": (re.compile(rf"\d[\d.,]*\s*(?:[a-zA-Zµ%/]+\s*)?(?:->|→|=>)\s*{_FIGURE}"),
                     "a before -> after figure (67.8 s -> 38.7 s, 7,947 -> 7,714 LUT)"),
    "figure before": (re.compile(rf"(?i){_FIGURE}\s+(?:before|earlier|previously|then|originally)\b"
                                 rf"|\b(?:before|was|were)\s*:\s*{_FIGURE}"),
                      "a figure as it was (112 ms before, before: 7.3 ms)"),
    "figure against": (re.compile(rf"(?i){_TIME}\s+(?:instead\s+of|against|compared\s+with|versus|vs\.?)\s+\d"
                                  rf"|{_TIME}\s*,\s*{_TIME}\s+(?:with|without)\s+(?:this|it|that)\b"),
                       "a time against another (12.0 ms against 13.1, 15.3 s, 4.9 s with this)"),
    "table row": (re.compile(r"(?im)^[\s*]*(?:before|after|now|old|new|was)\s*[:|]?\s+\d[\d.,]*\s+\d"),
                  "a before/after table row"),
    "timing here": (re.compile(rf"(?i){_TIME}[^.;()]{{0,40}}?\bon\s+(?:this|a|the|one|two|\d+)\s+(?:\w+\s+)?"
                               rf"(?:CPUs?|cores?|machine|host|laptop|runner|CI)\b"),
                    "a timing measured on some machine (about 12 ms on this CPU)"),
}

def python_prose(text: str) -> list[tuple[int, str]]:
    """The prose blocks of Python source ``text``: (first line, text) of each docstring (every bare string
    statement) and each run of comments on consecutive lines (their text after ``#``, joined by newlines)."""
    blocks = []
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            # the literal's source lines, so that line numbers hold whatever escapes it has
            blocks.append((node.lineno, "\n".join(text.splitlines()[node.lineno - 1:node.end_lineno])))
    run: list[tuple[int, str]] = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type != tokenize.COMMENT:
            continue
        line = tok.start[0]
        if run and line != run[-1][0] + 1:
            blocks.append((run[0][0], "\n".join(t for _, t in run)))
            run = []
        run.append((line, tok.string.lstrip("#")))
    if run:
        blocks.append((run[0][0], "\n".join(t for _, t in run)))
    return sorted(blocks)


def c_prose(text: str) -> list[tuple[int, str]]:
    """The comment blocks of C, C++ or Verilog ``text``: (first line, text) of each ``/* */`` comment and each
    run of ``//`` comments on consecutive lines. String and character literals are skipped."""
    blocks: list[tuple[int, str]] = []
    run: list[tuple[int, str]] = []
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] not in (c, "\n"):
                j += 2 if text[j] == "\\" else 1
            i = j + 1 if j < n and text[j] == c else j
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            if run and line != run[-1][0] + 1:
                blocks.append((run[0][0], "\n".join(t for _, t in run)))
                run = []
            run.append((line, text[i + 2:end]))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end
            blocks.append((line, text[i + 2:end]))
            line += text.count("\n", i, end)
            i = end + 2
        else:
            i += 1
    if run:
        blocks.append((run[0][0], "\n".join(t for _, t in run)))
    return sorted(blocks)


def history(text: str) -> list[tuple[int, str, str]]:
    """(line offset in ``text``, pattern name, matched words) of every narrative form in the prose ``text``."""
    hits = []
    for name, (pattern, _) in PATTERNS.items():
        for m in pattern.finditer(text):
            hits.append((text.count("\n", 0, m.start()), name, " ".join(m.group().split())))
    return sorted(hits)


def product_files() -> list[Path]:
    """Every product source file :data:`SUFFIXES` names, under :data:`PRODUCT` (no caches, no shipped data)."""
    files = []
    for folder in PRODUCT:
        for p in sorted((ROOT / folder).rglob("*")):
            skip = {"__pycache__", "data"} & set(p.relative_to(ROOT).parts)
            if p.suffix in SUFFIXES and p.is_file() and not skip:
                files.append(p)
    return files


def file_hits(path: Path) -> list[str]:
    """``path:line: pattern: words`` for every narrative form in the prose of ``path``."""
    text = path.read_text(encoding="utf-8")
    rel = path.relative_to(ROOT).as_posix()
    prose = python_prose(text) if SUFFIXES[path.suffix] == "python" else c_prose(text)
    out = []
    for first, block in prose:
        out += [f"{rel}:{first + offset}: {name}: {words!r}" for offset, name, words in history(block)]
    return out


def test_product_prose_has_no_history():
    hits = [h for p in product_files() for h in file_hits(p)]
    assert not hits, (f"{len(hits)} dates or before/after narrations in product code (say what the code does, "
                      f"in the present tense; measurements go to docs/benchmarks.md):\n" + "\n".join(hits))


def test_every_product_language_is_read():
    """The scan sees Python, the C++ references and header, and the runtime's C++ kernel."""
    rel = {p.relative_to(ROOT).as_posix() for p in product_files()}
    assert {"hwcontract/regmap.py", "hls_ref/cpp/verifier.cpp", "hls_ref/include/specdec_regs.h"} <= rel
    assert any(r.startswith("host/specdec/") and r.endswith(".cpp") for r in rel)


# -- the patterns on synthetic prose ---------------------------------------------------------------------------

CAUGHT = [
    ("iso date", "Measured 2026-11-27 over the 30 prompts."),
    ("iso date", "the November figures (2026-11) hold"),
    ("slash date", "run on 28/11/2026 with two threads"),
    ("month date", "Since Nov 28 the loop drafts trees."),
    ("month date", "measured on 28 November on two cores"),
    ("month date", "the build of November 2026"),
    ("year marker", "the kernel before 2026 read W twice"),
    ("year marker", "as of 2025 the core had one lane"),
    ("had done", "int() had taken parent 0.5 as node 0"),
    ("had done", "2.5 had raised numpy's TypeError"),
    ("had done", "True had been node 1"),
    ("had done", "a node off the tree had never drawn at all"),
    ("had done", "the value had run a greedy round"),
    ("used to", "The driver used to poll forever."),
    ("used to", "which used to be the slowest step"),
    ("no longer", "the head no longer shares the embedding's rows"),
    ("previously", "the loop previously sorted the row"),
    ("previously", "formerly a LUTRAM"),
    ("the fix", "before the fix, a float was node 0"),
    ("the fix", "after this change the kernel streams W once"),
    ("old version", "where the earlier kernel, two or three W rows, took 7.3 ms"),
    ("old version", "the old code read the file twice"),
    ("was ... now", "the sort was most of the time, now a partition does it"),
    ("was ... now", "it was 12.5 ms and is now 4"),
    ("now instead", "reads W now instead of twice"),
    ("now instead", "the kernel now streams where it read"),
    ("took", "2^18 words took 5.9 s that way"),
    ("took", "1,024 rows took 21 RAMB36 of the overlay's 117"),
    ("took", "a linear call took about 10 ms"),
    ("took", "int() took 0.7 as 0"),
    ("was worst", "count[pick_q] into fl_count's adder was the 64-slot build's worst path"),
    ("was worst", "the sort was most of a sampled round's host time"),
    ("(was X)", "the limit is 64 (was 32)"),
    ("(was X)", "a LUT count (previously 7,947)"),
    ("figure arrow", "make demo, warm: 67.8 s -> 38.7 s"),
    ("figure arrow", "7,947 -> 7,714 LUT"),
    ("figure arrow", "the simulation's 1.1 -> 3.1 tokens a second"),
    ("figure arrow", "accuracy 61% → 64%"),
    ("figure before", "18.4 ms now, 20.2 ms before"),
    ("figure before", "before: 7.3 ms"),
    ("figure against", "12.0 ms against 13.1"),
    ("figure against", "10 ms instead of 0.4"),
    ("figure against", "the verifier's: 15.3 s, 4.9 s with this"),
    ("table row", "rows    1    4\nbefore 7.3     7.3   7.3\nnow    6.4     6.5   7.0"),
    ("timing here", "about 12 ms on this CPU"),
    ("timing here", "about 18 s of every build's compile on 2 cores"),
    ("timing here", "takes about 20 s on a CI core"),
]

CLEAR = [
    "TLAST came before the last beat of a row.",
    "Copy on write: copy page RES_SRC into RES_PAGE before writing.",
    "the value a register had at reset",
    "the mass the row had before that token",
    "a parent must be a node before it (0..i - 1)",
    "checked before anything loads",
    "the row each page was allocated for",
    "nothing was written: call again",
    "Pages the pools hold now (they grow by doubling up to the core's PAGES).",
    "the sequence's slot from now on; it was made by FORK",
    "a placement made before is refused from now on",
    "the tree of the previous round",
    "an earlier layer of the same forward did it",
    "the key used to sort the rows",
    "The seed is used to draw the bonus token.",
    "Vivado 2022.2 and 2023.1 name the PS alike; zynq_ultra_ps_e is 3.4 in 2022.2",
    "EAGLE (Li et al., 2024) drafts at the feature level",
    "before 2048 cycles the FIFO is full",
    "issue -> memory read -> register (2) -> DSP A/B",
    "CHECK -> SLOT -> COPY x (len + 2) -> DONE",
    "output width (bits) -> CONFIG.OUT code: {8: 0, 16: 1}",
    "a tile is 432 bits instead of 512",
    "every core's real build at 4.0 ns or less (150 MHz with routing margin)",
    "the goal: a draft step in 1 ms on the KV260",
    "may 3 rows share a page",
    "a 2048-entry table, rows 0-63",
    "the head shares no rows with the embedding",
    "one thread: numpy's work here is too small to gain from more",
    "uint64 2**64-1 is not -1",
    "The original model is unchanged.",
    "nothing was written; the core is idle now",
    "it took one last cycle: fold its depth into maxd",
    "BUSY cycles spent waiting for a stream beat",
    "the row that was the last one tested",
    "1,024 rows take 21 RAMB36; the host takes 0.7 as a bad value",
]


@pytest.mark.parametrize("name, text", CAUGHT)
def test_pattern_catches(name, text):
    assert name in {n for _, n, _ in history(text)}, (name, text, history(text))


@pytest.mark.parametrize("text", CLEAR)
def test_present_tense_is_clear(text):
    assert not history(text), history(text)


def test_every_pattern_has_a_caught_case():
    assert {n for n, _ in CAUGHT} == set(PATTERNS)


def test_python_prose_reads_comments_and_docstrings_only():
    src = ('"""Module doc, 2026-11-28."""\nX = "had been a string"  # comment: had raised\n'
           'def f():\n    """Doc."""\n    return "no longer code"\n# one\n# two\n\n# three\n')
    blocks = python_prose(src)
    assert (1, '"""Module doc, 2026-11-28."""') in blocks
    assert (4, '    """Doc."""') in blocks
    assert (2, " comment: had raised") in blocks
    assert (6, " one\n two") in blocks and (9, " three") in blocks
    assert not any("had been a string" in b or "no longer code" in b for _, b in blocks)


def test_c_prose_reads_comments_only():
    src = ('// one\n// two\nint x = 1;  // three\nconst char *s = "// not a comment, had been";\n'
           '/* block\n   2026-11 */ int y;\nchar c = \'"\';  // after a quote char\n')
    assert c_prose(src) == [(1, " one\n two\n three"), (5, " block\n   2026-11 "), (7, " after a quote char")]


def test_hits_name_file_and_line(tmp_path, monkeypatch):
    """A violation reports its file, its line (in a comment block and a docstring alike) and its words."""
    f = tmp_path / "m.py"
    f.write_text('"""Doc.\n\nMeasured\n2026-11-27."""\nx = 1  # fine\n# int() had taken 1.5 as 1\n', encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert file_hits(f) == ["m.py:4: iso date: '2026-11-27'", "m.py:6: had done: 'had taken'"]
    g = tmp_path / "k.cpp"
    g.write_text('int x; // fine\n/* one\n * the earlier kernel */\n', encoding="utf-8")
    assert file_hits(g) == ["k.cpp:3: old version: 'the earlier kernel'"]
