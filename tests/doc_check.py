"""The documentation checker: the documentation tells the truth about the command line and the tree.

Documents: README.md, docs/*.md, host/specdec/data/models/**/README*.md and notebooks/*.ipynb (markdown cells as
markdown, code cells for ``!specdec`` lines and backticked commands in their messages). Three checks:

1. **Commands.** Every ``specdec ...`` command the documents show names a real command and only options
   of it, as ``specdec.cli.make_parser`` builds them (the parser itself, never a restated list; option
   strings must match exactly: an abbreviation argparse would complete is still wrong). A command in a
   fenced block (or a notebook's ``!specdec`` line) without placeholders (``[``, ``...``, ``<``, ``a|b``
   alternatives, ``FILE``-style metavars) must also parse completely with ``parse_args``, prefix matching
   off. Shell syntax is taken as the shell would: quoting (``shlex``), ``\\`` line continuations,
   ``# comments``, ``VAR=value`` prefixes, ``$VAR`` values; the command ends at ``|``, ``>``, ``&&``, ``;``.
   One test per (file, line).
2. **Paths.** Every repository path named in backticks, a fenced block or a link exists. A string counts
   as a repository path when it starts with a top-level entry of the repository (hidden ones and build
   outputs such as build/ excluded); ``:line`` suffixes and ``#anchors`` are dropped; globs and variables
   (``*``, ``<``, ``{``, ``[``, ``$``) are skipped; links resolve from the document's own folder. Files the
   tools write at run time (``RUN_TIME_OUTPUTS``) need only their folder.
3. **Make targets.** Every ``make TARGET ...`` shown in the documents is a target of the Makefile.

The last tests run the checkers on synthetic text: each check catches a wrong option, an abbreviation, a
wrong command, a missing path and a missing make target.
"""
from __future__ import annotations

import argparse
import fnmatch
import functools
import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, TypeVar

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")

#: Top-level folders that hold build outputs, never documented sources.
BUILD_OUTPUT_DIRS = frozenset({"build", "__pycache__"})

#: Files a tool writes at run time, uncommitted (``make bitstream``: the overlay, its hardware handoff, reports):
#: only their folder must exist.
RUN_TIME_OUTPUTS = tuple(f"host/specdec/data/overlays/*/{f}"
                         for f in ("specdec.bit", "specdec.hwh", "build.json", "timing.rpt", "utilization.rpt"))

#: Fence languages whose lines are not shell commands.
NON_SHELL_FENCES = frozenset({"python", "py", "json", "text", "verilog", "tcl", "cpp", "c++", "c"})

#: Box-drawing characters: a fenced block with them is a diagram (the layer tree), not commands.
DIAGRAM_CHARS = frozenset("├└│┌┐┘┬┴┼─")

#: Words that end a shell command (what follows is another command or a redirection).
SEPARATORS = frozenset({"|", "||", "&&", "&", ";", ">", ">>", "<", "2>", "2>>", "&>"})

#: The start of a ``specdec`` or ``make`` command: at the start of a line or after a separator, behind an
#: optional ``$ `` prompt or notebook ``!`` and ``VAR=value`` assignments; followed by an argument.
COMMAND_START = (r"(?:^|&&|\|\||[;|(])[ \t]*(?:\$[ \t]+|![ \t]*)?(?:[A-Za-z_]\w*=\S*[ \t]+)*"
                 r"(?P<cmd>{name})(?=[ \t]+[^\s#])")
SPECDEC_START = re.compile(COMMAND_START.format(name="specdec"), re.M)
MAKE_START = re.compile(COMMAND_START.format(name="make"), re.M)

CODE_SPAN = re.compile(r"`([^`]+)`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
OPTION = re.compile(r"^--?[A-Za-z][\w-]*")
METAVAR = re.compile(r"^[A-Z][A-Z0-9_]*(?:=[A-Z][A-Z0-9_]*)?$")
VARIABLE = re.compile(r"^\$+(?:\w+|\{\w+\}|\(\w+\))$")
PLACEHOLDER_MARKS = ("[", "]", "...", "<", ">", "|")
GLOB_MARKS = frozenset("*<{[$")


# ---------------------------------------------------------------------------------------------- documents


@dataclass(frozen=True)
class Chunk:
    """A piece of a document.

    Attributes
    ----------
    path : str
        The document, relative to the repository root.
    kind : str
        ``"prose"`` (markdown with its fenced blocks blanked), ``"fence"`` (a fenced block's body) or
        ``"code"`` (a notebook code cell).
    lang : str
        A fenced block's language (``""`` otherwise).
    text : str
        The text; its first line is line ``first_line`` of the document (of the cell in a notebook).
    first_line : int
        Line number of ``text``'s first line.
    cell : int or None
        The notebook cell (from 1), None in a markdown file.
    """

    path: str
    kind: str
    lang: str
    text: str
    first_line: int = 1
    cell: int | None = None

    def where(self, offset: int) -> str:
        """``path:line`` (``path:cellN:line`` in a notebook) of character ``offset`` of ``text``."""
        line = self.first_line + self.text.count("\n", 0, offset)
        return f"{self.path}:cell{self.cell}:{line}" if self.cell is not None else f"{self.path}:{line}"


def split_markdown(text: str, path: str, cell: int | None = None) -> list[Chunk]:
    """The prose (fenced blocks blanked, so line numbers stay) and each fenced block of markdown ``text``.

    Parameters
    ----------
    text : str
        Markdown.
    path : str
        The document, relative to the repository root.
    cell : int or None
        The notebook cell holding ``text``.

    Returns
    -------
    list of Chunk
        The prose chunk first, then one ``"fence"`` chunk per fenced block.
    """
    prose: list[str] = []
    chunks: list[Chunk] = []
    fence: list[str] | None = None
    lang, start = "", 0
    for number, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            if fence is None:
                fence, lang, start = [], line.lstrip()[3:].strip().split(" ")[0].lower(), number + 1
            else:
                chunks.append(Chunk(path, "fence", lang, "\n".join(fence), start, cell))
                fence = None
            prose.append("")
        elif fence is not None:
            fence.append(line)
            prose.append("")
        else:
            prose.append(line)
    return [Chunk(path, "prose", "", "\n".join(prose), 1, cell), *chunks]


def markdown_paths() -> list[str]:
    """README.md, docs/*.md and host/specdec/data/models/**/README*.md, relative to the repository root."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "host/specdec/data/models").glob("**/README*.md"))]
    return [p.relative_to(ROOT).as_posix() for p in found if p.is_file()]


def notebook_paths() -> list[str]:
    """notebooks/*.ipynb, relative to the repository root."""
    return [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]


def notebook_chunks(path: str) -> list[Chunk]:
    """Markdown cells of the notebook at ``path`` split as markdown; code cells as ``"code"`` chunks."""
    cells = json.loads((ROOT / path).read_text(encoding="utf-8"))["cells"]
    chunks: list[Chunk] = []
    for number, cell in enumerate(cells, 1):
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            chunks += split_markdown(source, path, number)
        elif cell["cell_type"] == "code":
            chunks.append(Chunk(path, "code", "", source, 1, number))
    return chunks


@functools.lru_cache(maxsize=None)
def all_chunks() -> tuple[Chunk, ...]:
    """Every chunk of every document."""
    chunks: list[Chunk] = []
    for path in markdown_paths():
        chunks += split_markdown((ROOT / path).read_text(encoding="utf-8"), path)
    for path in notebook_paths():
        chunks += notebook_chunks(path)
    return tuple(chunks)


def by_place(where: str) -> tuple[str, int, int]:
    """A sort key for ``path:line`` (``path:cellN:line``): by path, then cell and line as numbers."""
    path, *numbers = where.split(":")
    cell, line = ([0] + [int(n.removeprefix("cell")) for n in numbers])[-2:]
    return path, cell, line


def group(items: Iterable[tuple[str, T]]) -> dict[str, list[T]]:
    """``(where, item)`` pairs grouped by ``where``, in order."""
    out: dict[str, list[T]] = {}
    for where, item in items:
        out.setdefault(where, []).append(item)
    return out


# ---------------------------------------------------------------------------------------------- shell text


@dataclass(frozen=True)
class Command:
    """A shell command found in a document.

    Attributes
    ----------
    where : str
        ``path:line`` of its first line.
    text : str
        From the command word to the end of its span or logical line.
    complete : bool
        Shown in a fenced block or a notebook ``!`` line: must parse completely unless it has placeholders.
    """

    where: str
    text: str
    complete: bool


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(offset, line)`` of each line of shell ``text``, ``\\``-continued lines joined into one."""
    offset, pending, start = 0, "", 0
    for line in text.split("\n"):
        if not pending:
            start = offset
        offset += len(line) + 1
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending = ""
    if pending:
        yield start, pending


def strip_comment(line: str) -> str:
    """``line`` up to its shell comment: a ``#`` that starts a word, outside quotes."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def shell_words(text: str) -> list[str]:
    """The words of one shell command, as the shell splits them, up to the first separator.

    Parameters
    ----------
    text : str
        A command line (continuations already joined or not).

    Returns
    -------
    list of str
        Its words, quotes removed, the comment and anything from ``|``, ``>``, ``&&`` or ``;`` on cut.
    """
    text = strip_comment(text.replace("\\\n", " "))
    try:
        lexer = shlex.shlex(text, posix=True)
        lexer.whitespace_split, lexer.commenters = True, ""
        words = list(lexer)
    except ValueError:                  # unbalanced quotes: a span cut mid-command
        words = text.split()
    out: list[str] = []
    for word in words:
        if word in SEPARATORS or word.startswith((">", "2>", "&>", "|")):
            break
        if word.endswith(";"):
            out.append(word[:-1])
            break
        out.append(word)
    return out


def has_placeholder(words: Iterable[str]) -> bool:
    """Whether a command's words hold placeholders: ``[``, ``...``, ``<``, ``a|b`` or an upper-case metavar."""
    return any(any(mark in w for mark in PLACEHOLDER_MARKS) or METAVAR.match(w) for w in words)


def commands_in(chunk: Chunk) -> Iterator[Command]:
    """The ``specdec`` commands of ``chunk``.

    Prose and code cells: those in backticks (checked for options only). Fenced blocks of a shell (or no)
    language, diagrams excepted, and notebook ``!specdec`` lines: those at the start of a line (parsed
    completely).
    """
    if chunk.kind in ("prose", "code"):
        for span in CODE_SPAN.finditer(chunk.text):
            for match in SPECDEC_START.finditer(span.group(1)):
                yield Command(chunk.where(span.start(1) + match.start("cmd")),
                              span.group(1)[match.start("cmd"):], False)
    if chunk.kind == "fence" and (chunk.lang in NON_SHELL_FENCES or DIAGRAM_CHARS & set(chunk.text)):
        return
    if chunk.kind in ("fence", "code"):
        for offset, line in logical_lines(chunk.text):
            if chunk.kind == "code" and not line.lstrip().startswith("!"):
                continue
            for match in SPECDEC_START.finditer(line):
                yield Command(chunk.where(offset), line[match.start("cmd"):], True)


def make_commands_in(chunk: Chunk) -> Iterator[tuple[str, list[str]]]:
    """``(where, words after make)`` for each ``make`` command of a prose span or a shell fenced block."""
    texts: list[tuple[int, str]] = []
    if chunk.kind == "prose":
        texts = [(m.start(1), m.group(1)) for m in CODE_SPAN.finditer(chunk.text)]
    elif chunk.kind == "fence" and chunk.lang not in NON_SHELL_FENCES:
        texts = list(logical_lines(chunk.text))
    for offset, text in texts:
        for match in MAKE_START.finditer(text):
            yield chunk.where(offset + match.start("cmd")), shell_words(text[match.start("cmd"):])[1:]


# ---------------------------------------------------------------------------------------------- the parser


class DocParseError(Exception):
    """An argparse error of a documented command."""


def iter_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subparser below it."""
    yield parser
    action = subcommands(parser)
    if action is not None:
        for sub in dict.fromkeys(action.choices.values()):
            yield from iter_parsers(sub)


def subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    """The subcommand action of ``parser``, None for a leaf."""
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def strict(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` with prefix matching off and errors raised as ``DocParseError`` (for every subparser)."""
    for p in iter_parsers(parser):
        def error(message: str, prog: str = p.prog) -> None:
            raise DocParseError(f"{prog}: {message}")
        p.allow_abbrev, p.error = False, error
    return parser


@functools.lru_cache(maxsize=None)
def specdec_parser() -> argparse.ArgumentParser:
    """The real ``specdec`` parser (``specdec.cli.make_parser``), made strict."""
    from specdec.cli import make_parser
    return strict(make_parser())


def option_errors(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """What is wrong with the command words and option names of ``specdec ARGS`` (values not checked).

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The top-level parser.
    args : list of str
        The words after ``specdec``; placeholders allowed (``[--core NAME]``, ``--tree a|b``, ``...``).

    Returns
    -------
    list of str
        One message per unknown command or per option string the command does not have exactly (a group
        named without its command, ``specdec bench``, is no error here: ``parse_error`` catches it).
    """
    errors: list[str] = []
    current, pending = parser, subcommands(parser)
    for word in args:
        for piece in re.split(r"[|]", word.strip("[](){},")):
            piece = piece.strip("[](){},")
            if OPTION.match(piece):
                option = piece.split("=", 1)[0]
                if option not in current._option_string_actions:
                    errors.append(f"'{option}' is not an option of '{current.prog}'")
            elif pending is not None and piece and piece != "...":
                if piece not in pending.choices:
                    errors.append(f"'{piece}' is not a command of '{current.prog}' "
                                  f"(choices: {', '.join(pending.choices)})")
                    return errors
                current = pending.choices[piece]
                pending = subcommands(current)
    return errors


def parse_error(parser: argparse.ArgumentParser, args: list[str]) -> str | None:
    """argparse's message for ``specdec ARGS`` (None when it parses); a ``$VAR`` word that is no option's
    value is dropped (it expands to options not shown)."""
    kept: list[str] = []
    for word in args:
        if VARIABLE.match(word) and not (kept and kept[-1].startswith("-")):
            continue
        kept.append(word)
    try:
        parser.parse_args(kept)
    except DocParseError as err:
        return str(err)
    except SystemExit as err:           # -h / --help
        return None if err.code == 0 else f"exit {err.code}"
    return None


def command_errors(parser: argparse.ArgumentParser, command: Command) -> list[str]:
    """Everything wrong with ``command``: its option names, and its full parse when it is complete and has
    no placeholders."""
    args = shell_words(command.text)[1:]
    errors = option_errors(parser, args)
    if not errors and command.complete and not has_placeholder(args):
        message = parse_error(parser, args)
        if message:
            errors.append(message)
    return [f"{command.where}: `specdec {' '.join(args)}`: {e}" for e in errors]


# ---------------------------------------------------------------------------------------------- paths, make


def top_level_names(root: Path = ROOT) -> frozenset[str]:
    """Entries of the repository root a documented path may start with: not hidden, not build outputs."""
    return frozenset(n for n in os.listdir(root) if not n.startswith(".") and n not in BUILD_OUTPUT_DIRS)


def path_pattern(names: Iterable[str]) -> re.Pattern[str]:
    """A path that starts with one of ``names`` (a whole component), ends before ``:line`` or ``#anchor``."""
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![\w./$~-])(?:{alternatives})(?:/[\w.@+-]*)*(?![\w.@+-])")


def paths_in(text: str, pattern: re.Pattern[str]) -> Iterator[tuple[int, str]]:
    """``(offset, path)`` of each repository path in ``text``; globs and variables skipped."""
    for match in pattern.finditer(text):
        if text[match.end():match.end() + 1] in GLOB_MARKS:
            continue
        yield match.start(), match.group(0).rstrip(".")


def missing_path(path: str, root: Path = ROOT) -> bool:
    """Whether the repository path ``path`` is missing (a run-time output: whether its folder is)."""
    if any(fnmatch.fnmatch(path, pattern) for pattern in RUN_TIME_OUTPUTS):
        return not (root / path).parent.is_dir()
    return not (root / path).exists()


def link_targets(chunk: Chunk) -> Iterator[tuple[int, str]]:
    """``(offset, repository path)`` of each local link of a prose chunk, resolved from its document's
    folder, anchors dropped."""
    for match in LINK.finditer(chunk.text):
        target = match.group(1).split("#", 1)[0]
        if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("/"):
            continue
        resolved = os.path.normpath(os.path.join(os.path.dirname(chunk.path), target))
        yield match.start(1), Path(resolved).as_posix()


def named_paths(chunk: Chunk, pattern: re.Pattern[str]) -> Iterator[tuple[int, str, str]]:
    """``(offset, path, how)`` of each repository path a chunk names: in backticks or a link (prose), anywhere
    in a fenced block; ``how`` is ``"named"`` or ``"linked"``. Notebook code cells name none."""
    if chunk.kind == "prose":
        for span in CODE_SPAN.finditer(chunk.text):
            yield from ((span.start(1) + o, p, "named") for o, p in paths_in(span.group(1), pattern))
        yield from ((o, p, "linked") for o, p in link_targets(chunk))
    elif chunk.kind == "fence":
        yield from ((o, p, "named") for o, p in paths_in(chunk.text, pattern))


def path_errors(chunk: Chunk, pattern: re.Pattern[str], root: Path = ROOT) -> list[str]:
    """``where: message`` for each missing path a chunk names."""
    return [f"{chunk.where(offset)}: {how} path '{path}' does not exist"
            for offset, path, how in named_paths(chunk, pattern) if missing_path(path, root)]


def makefile_targets(makefile: str) -> frozenset[str]:
    """The targets of a Makefile's text: every name before ``:`` on a rule line (not ``:=``, not ``.PHONY``)."""
    targets: set[str] = set()
    for match in re.finditer(r"^([A-Za-z0-9_][\w.-]*(?:[ \t]+[A-Za-z0-9_][\w.-]*)*)[ \t]*::?(?!=)",
                             makefile, re.M):
        targets.update(match.group(1).split())
    return frozenset(targets)


def make_errors(words: list[str], targets: frozenset[str]) -> list[str]:
    """The goals of ``make WORDS`` that are no target (options, ``VAR=value`` and placeholders skipped)."""
    goals = [w for w in words if not w.startswith("-") and "=" not in w and not has_placeholder([w])]
    return [f"'make {g}': no such target in the Makefile" for g in goals if g not in targets]


# ---------------------------------------------------------------------------------------------- collection


def collect_commands() -> dict[str, list[Command]]:
    """Every documented ``specdec`` command, grouped by ``path:line``."""
    return group((c.where, c) for chunk in all_chunks() for c in commands_in(chunk))


def collect_paths() -> dict[str, list[str]]:
    """Every documented repository path, grouped by ``path:line``."""
    pattern = path_pattern(top_level_names())
    return group((chunk.where(o), p) for chunk in all_chunks() for o, p, _ in named_paths(chunk, pattern))


def collect_make_commands() -> dict[str, list[list[str]]]:
    """Every documented ``make`` command's words, grouped by ``path:line``."""
    return group(found for chunk in all_chunks() for found in make_commands_in(chunk))




@functools.lru_cache(maxsize=None)
def real_targets() -> frozenset[str]:
    """The targets of the repository's Makefile."""
    return makefile_targets((ROOT / "Makefile").read_text(encoding="utf-8"))
