"""bench/results holds one file per bench configuration, and its index names each with the command that writes it.

The index is bench/results/README.md. Checks:

1. **Every entry indexed, every index entry there.** Each file and plot folder of bench/results (the index
   aside) is named in the index's prose (in backticks: ``name.json``, ``name/``) and written by one of its
   commands (``--json bench/results/NAME``, ``--plot bench/results/DIR``); each name the prose gives and each
   output a command writes exists.
2. **The latest run only.** No name carries a run counter or the tag of an earlier variant of the same
   configuration (``_run2``, ``_f32rows_run4``, ``_unpadded``, ``_fast``): earlier runs are figures in
   docs/benchmarks.md, not files.
3. **The commands are real.** A ``specdec`` command parses completely with the command line's own parser,
   through tests/doc_check.py's checker (``commands_in``, ``command_errors``); a ``python scripts/X.py``
   command names a script of the tree and only options its argument parser defines. Each JSON file parses.

The last test runs the checker on a synthetic folder: an unindexed file, a leftover name, a missing entry, an
entry without a command and a wrong option are each caught.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import doc_check

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench/results"
INDEX = "README.md"

#: A backticked name in the index's prose that names an entry: a file with an extension, or a folder ``name/``.
ENTRY_NAME = re.compile(r"^[A-Za-z0-9_.-]+(?:\.[A-Za-z0-9]+|/)$")

#: A name part that marks a repeated or superseded run rather than a configuration.
LEFTOVER = re.compile(r"(?:^|_)(?:run\d*|f32rows|unpadded|padded|fast|slow|old|new|tmp|copy|bak)(?=[_./]|$)")

#: The options of a command whose value is the file or folder it writes.
OUTPUT_OPTIONS = ("--json", "--plot")

#: How a script command starts.
SCRIPT_COMMAND = re.compile(r"^(?:python3?|\.venv/bin/python)\s+(?P<script>scripts/[\w.-]+\.py)\b")


def entries(folder: Path) -> set[str]:
    """The files (``name``) and folders (``name/``) of ``folder``, its index aside."""
    return {p.name + ("/" if p.is_dir() else "") for p in folder.iterdir() if p.name != INDEX}


def leftover_names(names: set[str]) -> list[str]:
    """The names that carry a run counter or an earlier variant's tag."""
    return sorted(n for n in names if LEFTOVER.search(n))


def prose_names(chunks: list[doc_check.Chunk]) -> set[str]:
    """The entry names the index's prose gives in backticks."""
    return {span.group(1) for chunk in chunks if chunk.kind == "prose"
            for span in doc_check.CODE_SPAN.finditer(chunk.text) if ENTRY_NAME.match(span.group(1))}


def outputs(words: list[str], rel: str) -> set[str]:
    """The entries of folder ``rel`` (relative to the repository) that a command's words write."""
    found = set()
    for option, value in zip(words, words[1:]):
        if option in OUTPUT_OPTIONS and value.startswith(rel + "/"):
            found.add(value.removeprefix(rel + "/") + ("/" if option == "--plot" else ""))
    return found


def script_options(script: Path) -> set[str]:
    """The option strings of every ``add_argument`` call in ``script``."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    return {arg.value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument"
            for arg in node.args if isinstance(arg, ast.Constant) and str(arg.value).startswith("-")}


def script_errors(where: str, line: str, root: Path) -> list[str]:
    """What is wrong with a ``python scripts/X.py ...`` command: a missing script or an option it lacks."""
    script = root / SCRIPT_COMMAND.match(line).group("script")
    if not script.is_file():
        return [f"{where}: no such script {script.relative_to(root)}"]
    known = script_options(script)
    return [f"{where}: '{w.split('=', 1)[0]}' is not an option of {script.relative_to(root)}"
            for w in doc_check.shell_words(line)[2:] if w.startswith("-") and w.split("=", 1)[0] not in known]


def index_problems(folder: Path, root: Path = ROOT) -> list[str]:
    """Everything wrong between ``folder`` and its index: unindexed or missing entries, entries no command
    writes, commands that do not parse, JSON that does not load.

    Parameters
    ----------
    folder : Path
        The results folder (it holds ``README.md``).
    root : Path
        The repository root: commands name the folder relative to it, and scripts live under it.

    Returns
    -------
    list of str
        One message per problem (empty when the folder and its index agree).
    """
    rel = folder.relative_to(root).as_posix()
    index = folder / INDEX
    if not index.is_file():
        return [f"{rel}: no index {INDEX}"]
    where_index = f"{rel}/{INDEX}"
    chunks = doc_check.split_markdown(index.read_text(encoding="utf-8"), where_index)
    problems: list[str] = []
    written: set[str] = set()
    for chunk in chunks:
        for command in doc_check.commands_in(chunk):
            if chunk.kind == "fence":
                problems += doc_check.command_errors(doc_check.specdec_parser(), command)
                written |= outputs(doc_check.shell_words(command.text), rel)
        if chunk.kind == "fence":
            for offset, line in doc_check.logical_lines(chunk.text):
                if SCRIPT_COMMAND.match(line.strip()):
                    problems += script_errors(chunk.where(offset), line.strip(), root)
                    written |= outputs(doc_check.shell_words(line), rel)
    have, named = entries(folder), prose_names(chunks)
    problems += [f"{rel}/{n}: not named in {where_index}" for n in sorted(have - named)]
    problems += [f"{rel}/{n}: named in {where_index} but not in the folder" for n in sorted(named - have)]
    problems += [f"{rel}/{n}: no command in {where_index} writes it" for n in sorted(have - written)]
    problems += [f"{rel}/{n}: written by a command in {where_index} but not in the folder"
                 for n in sorted(written - have)]
    for name in sorted(n for n in have if n.endswith(".json")):
        try:
            json.loads((folder / name).read_text(encoding="utf-8"))
        except ValueError as err:
            problems.append(f"{rel}/{name}: not JSON ({err})")
    return problems


# ---------------------------------------------------------------------------------------------- the folder


def test_every_result_is_indexed_with_the_command_that_writes_it() -> None:
    """bench/results and its index agree, and every indexed command parses."""
    problems = index_problems(RESULTS)
    assert not problems, "\n".join(problems)


def test_one_file_per_configuration() -> None:
    """No run counters or earlier variants' tags: each configuration keeps its latest run under one name."""
    assert not leftover_names(entries(RESULTS)), leftover_names(entries(RESULTS))


def test_index_found() -> None:
    """The scan sees the index's entries and commands (an empty index cannot pass silently)."""
    chunks = doc_check.split_markdown((RESULTS / INDEX).read_text(encoding="utf-8"), f"bench/results/{INDEX}")
    commands = [c for chunk in chunks if chunk.kind == "fence" for c in doc_check.commands_in(chunk)]
    assert len(entries(RESULTS)) >= 10 and len(commands) >= 10
    assert {"verifier_v50257_g4_l4.json", "e2e_demo_eagle_ref_greedy.json", "e2e_demo_eagle_ref_greedy/"} \
        <= prose_names(chunks)


# ---------------------------------------------------------------------------------------------- the checker

SYNTHETIC_INDEX = '''# results
`a.json`: a kept run.
```sh
specdec bench kv --pages 256 --json bench/results/a.json
```
`b.json`: a run whose command is wrong.
```sh
specdec bench kv --pagez 256 --json bench/results/b.json
```
`gone.json`, plots in `gone/`: named, not there.
`e2e_x/`: plots no command writes.
`d.json`: a script's run.
```sh
python scripts/diag_sampled_tree.py --trials 4 --jsn bench/results/d.json
```
'''


def test_checker_catches_unindexed_leftover_missing_and_wrong_entries(tmp_path: Path) -> None:
    """An unindexed leftover run, entries named but absent, an entry no command writes, a wrong option of the
    command line and of a script, and a file that is not JSON are each reported; the good entry is not."""
    folder = tmp_path / "bench/results"
    folder.mkdir(parents=True)
    (folder / INDEX).write_text(SYNTHETIC_INDEX)
    for name in ("a.json", "b.json", "d.json", "a_run2.json"):
        (folder / name).write_text("{}")
    (folder / "d.json").write_text("{")
    (folder / "e2e_x").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts/diag_sampled_tree.py").write_text((ROOT / "scripts/diag_sampled_tree.py").read_text())
    problems = index_problems(folder, tmp_path)
    text = "\n".join(problems)
    assert "bench/results/a_run2.json: not named in bench/results/README.md" in problems, text
    assert "bench/results/a_run2.json: no command in bench/results/README.md writes it" in problems, text
    assert "bench/results/gone.json: named in bench/results/README.md but not in the folder" in problems, text
    assert "bench/results/gone/: named in bench/results/README.md but not in the folder" in problems, text
    assert "bench/results/e2e_x/: no command in bench/results/README.md writes it" in problems, text
    assert "bench/results/d.json: no command in bench/results/README.md writes it" in problems, text
    assert any("'--pagez' is not an option of 'specdec bench kv'" in p for p in problems), text
    assert any("'--jsn' is not an option of scripts/diag_sampled_tree.py" in p for p in problems), text
    assert any(p.startswith("bench/results/d.json: not JSON") for p in problems), text
    assert not any(p.startswith("bench/results/a.json") for p in problems), text
    assert len(problems) == 9, text
    assert leftover_names({"a.json", "a_run2.json", "x_f32rows_run4.json", "x_unpadded.json", "x_fast_run1.json",
                           "x_fast/", "verifier_v50257_g4_l4.json", "e2e_demo_eagle_trees8d4_ref_greedy/"}) == \
        ["a_run2.json", "x_f32rows_run4.json", "x_fast/", "x_fast_run1.json", "x_unpadded.json"]
