"""The documentation tells the truth about the command line and the tree (the checker: ``doc_check``).

One test per documented command, path and make target, then the checkers run on synthetic text: each check catches
a wrong option, an abbreviation, a wrong command, a missing path and a missing make target.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from doc_check import (ROOT, Chunk, by_place, collect_commands, collect_make_commands, collect_paths, command_errors,
                       commands_in, group, make_commands_in, make_errors, makefile_targets, markdown_paths,
                       missing_path, notebook_paths, option_errors, parse_error, path_errors, path_pattern, paths_in,
                       real_targets, shell_words, specdec_parser, split_markdown, subcommands,
                       top_level_names)

COMMANDS, PATHS, MAKES = collect_commands(), collect_paths(), collect_make_commands()


# ---------------------------------------------------------------------------------------------- the docs


@pytest.mark.parametrize("where", sorted(COMMANDS, key=by_place))
def test_documented_command(where: str) -> None:
    """The ``specdec`` commands shown at ``where`` name real commands and options, and parse when complete."""
    errors = [e for command in COMMANDS[where] for e in command_errors(specdec_parser(), command)]
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("where", sorted(PATHS, key=by_place))
def test_documented_path(where: str) -> None:
    """The repository paths named at ``where`` exist."""
    missing = [p for p in PATHS[where] if missing_path(p)]
    assert not missing, f"{where}: no such path in the repository: {', '.join(missing)}"


@pytest.mark.parametrize("where", sorted(MAKES, key=by_place))
def test_documented_make_target(where: str) -> None:
    """The ``make`` goals shown at ``where`` are targets of the Makefile."""
    errors = [e for words in MAKES[where] for e in make_errors(words, real_targets())]
    assert not errors, f"{where}: " + "; ".join(errors)


def test_documents_found() -> None:
    """The scan sees the documents and what they show (so an empty parametrization cannot pass silently)."""
    complete = [c for cs in COMMANDS.values() for c in cs if c.complete]
    assert len(markdown_paths()) >= 10 and len(notebook_paths()) >= 6
    assert len(complete) >= 20 and len(COMMANDS) >= 40
    assert len(PATHS) >= 50 and len(MAKES) >= 5
    assert {"demo", "test", "setup", "bitstream", "clean"} <= real_targets()
    assert "generate" in subcommands(specdec_parser()).choices


# ---------------------------------------------------------------------------------------------- the checkers

SYNTHETIC = '''# A document
Run `specdec bench verifier --vocab 256 --jsn out.json` or `specdec bench kv --json kv.json`, or
`SPECDEC_EMULATE=kv260 specdec generate --backend pynq --prompt ...`; see `host/specdec/cli.py:611`,
`host/specdec/nope.py`, `tb/*/test_*.py`, `bench/results/x_{a,b}.json` and [the tree](tree.md#layers),
[gone](gone.md). `make demo` then `make demoo`, `make demo DEMO_ARGS="--gamma 2"`.

```sh
specdec generate --prompt "ROMEO:\\nBut soft" --gamma 4 \\
    --max-new-tokens 8            # fine
specdec generate --prompt "x" --max-new 8 | tee log
specdec bench verifire --vocab 256
specdec generate --prompt "$DEMO_PROMPT" --gamma four
specdec generate --prompt ... --tree static|eagle [--tree-budget N]
make test-longg
```
'''


def synthetic_chunks() -> list[Chunk]:
    """``SYNTHETIC`` as if it were docs/synthetic.md."""
    return split_markdown(SYNTHETIC, "docs/synthetic.md")


def synthetic_command_errors() -> dict[str, list[str]]:
    """The command errors of ``SYNTHETIC``, by line."""
    return group((c.where, e) for chunk in synthetic_chunks() for c in commands_in(chunk)
                 for e in command_errors(specdec_parser(), c))


def test_checker_catches_wrong_options_and_commands() -> None:
    """A wrong option (inline and fenced), an abbreviation, a wrong command and a bad value are caught;
    good commands, placeholders, continuations, comments, variables and pipes are not."""
    errors = synthetic_command_errors()
    assert set(errors) == {"docs/synthetic.md:2", "docs/synthetic.md:10", "docs/synthetic.md:11",
                           "docs/synthetic.md:12"}, errors
    assert "'--jsn' is not an option of 'specdec bench verifier'" in errors["docs/synthetic.md:2"][0]
    assert "'--max-new' is not an option of 'specdec generate'" in errors["docs/synthetic.md:10"][0]
    assert "'verifire' is not a command of 'specdec bench'" in errors["docs/synthetic.md:11"][0]
    assert "--gamma" in errors["docs/synthetic.md:12"][0]
    found = [c for chunk in synthetic_chunks() for c in commands_in(chunk)]
    assert [c.complete for c in found] == [False, False, False, True, True, True, True, True]


def test_checker_refuses_abbreviations_argparse_would_take() -> None:
    """``--max-new`` parses with argparse's prefix matching; the strict parser and the option check refuse it."""
    from specdec.cli import make_parser
    args = ["generate", "--prompt", "x", "--max-new", "8"]
    assert make_parser().parse_args(args).max_new_tokens == 8
    assert "unrecognized arguments: --max-new" in parse_error(specdec_parser(), args)
    assert option_errors(specdec_parser(), args) == ["'--max-new' is not an option of 'specdec generate'"]
    assert "required: ACTION" in parse_error(specdec_parser(), ["bench"])      # a group without its command


def test_shell_words() -> None:
    """Quotes, comments, continuations and separators are taken as the shell takes them."""
    assert shell_words('specdec generate --prompt "a # b" --gamma 4  # greedy') == \
        ["specdec", "generate", "--prompt", "a # b", "--gamma", "4"]
    assert shell_words("specdec bench kv \\\n  --json kv.json > log && echo done") == \
        ["specdec", "bench", "kv", "--json", "kv.json"]
    assert shell_words("specdec bench kv --json kv.json; ls") == ["specdec", "bench", "kv", "--json", "kv.json"]
    assert parse_error(specdec_parser(), ["generate", "--prompt", "$$DEMO_PROMPT", "$(DEMO_ARGS)"]) is None


def test_checker_catches_missing_paths(tmp_path: Path) -> None:
    """Missing named and linked paths are caught; globs, ``:line`` and ``#anchor`` are handled."""
    pattern = path_pattern(top_level_names())
    errors = [e for chunk in synthetic_chunks() for e in path_errors(chunk, pattern)]
    assert errors == ["docs/synthetic.md:4: named path 'host/specdec/nope.py' does not exist",
                      "docs/synthetic.md:5: linked path 'docs/gone.md' does not exist"], errors
    (tmp_path / "host/specdec/data/overlays/kv260").mkdir(parents=True)
    assert not missing_path("host/specdec/data/overlays/kv260/specdec.bit", tmp_path)
    assert missing_path("host/specdec/data/overlays/zcu104/specdec.bit", tmp_path)
    assert [p for _, p in paths_in("`fpga.convert`, hwcontract/board.py:12, notfpga/x", pattern)] == \
        ["hwcontract/board.py"]


def test_checker_catches_missing_make_targets() -> None:
    """``make demoo`` and ``make test-longg`` are caught; ``make demo DEMO_ARGS=...`` is not."""
    found = [(w, make_errors(words, real_targets())) for chunk in synthetic_chunks()
             for w, words in make_commands_in(chunk)]
    assert found == [("docs/synthetic.md:5", []),
                     ("docs/synthetic.md:5", ["'make demoo': no such target in the Makefile"]),
                     ("docs/synthetic.md:5", []),
                     ("docs/synthetic.md:14", ["'make test-longg': no such target in the Makefile"])], found
    assert makefile_targets("A := 1\nall: b\nb c: ; x\n.PHONY: all\n\tmake: no\n") == {"all", "b", "c"}


#: The README is a newcomer's five-minute tour: status, history and bench tables live in docs/.
README_MAX_LINES = 150
LINE_MAX = 120


def test_readme_is_a_short_tour() -> None:
    """At most 150 lines, none over 120 characters (characters, not bytes: the diagrams draw with box characters)."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    long = [(i, len(line)) for i, line in enumerate(lines, 1) if len(line) > LINE_MAX]
    assert not long, f"README.md lines over {LINE_MAX} characters (line, length): {long}"
