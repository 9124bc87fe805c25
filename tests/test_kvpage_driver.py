"""The kvpage driver on the golden backend (the same checks run against the RTL in tb/kvpage)."""
from __future__ import annotations

import re

import pytest

from specdec import errors
from specdec.hw.drivers.kvpage import KVPageError
from specdec.kv.pagetable import PageTableMismatch, PagedKV
from tb.kvpage.driver_checks import check_kvpage_driver, golden_driver


@pytest.mark.parametrize("pages,max_blocks,slots", [(256, 64, 64), (16, 8, 64), (1024, 1024, 64), (256, 64, 16)])
def test_driver_scenario(pages, max_blocks, slots):
    check_kvpage_driver(golden_driver(pages, max_blocks, slots))


def test_driver_reads_the_slot_count():
    """A 16-slot build (the PYNQ-Z2's): the driver takes SLOTS from PARAMS and refuses a slot past it
    before anything reaches the core."""
    kv = golden_driver(256, 64, 16)
    assert kv.slots == 16
    with pytest.raises(ValueError, match=r"slot 16 outside 0\.\.15"):
        kv.rollback([16])
    assert [kv.new() for _ in range(16)] == list(range(16))
    with pytest.raises(KVPageError, match="NO_SLOT"):
        kv.new()
    assert kv.live() == (list(range(16)), [])


def test_errors_name_the_operation():
    kv = golden_driver(16, 4)
    with pytest.raises(KVPageError, match=r"kvpage FREE\(slot=3\) refused: BAD_SLOT"):
        kv.free(3)
    seq = kv.new()                                   # the core took the next operation at once
    with pytest.raises(ValueError, match="slot 64"):
        kv.rollback([64])
    for r in range(4):
        kv.write_row(seq, r)
    with pytest.raises(KVPageError, match="BAD_ROW"):
        kv.write_row(seq, 4)                         # MAX_BLOCKS rows already
    other = kv.new()
    for r in range(4):
        kv.write_row(other, r)
    while kv.free_pages:
        kv.write_row(kv.fork(seq), 3)                # copy on write takes a page each
    with pytest.raises(KVPageError, match="POOL_EMPTY"):
        kv.write_row(kv.fork(other), 3)
    assert [kv.translate(other, r) for r in range(4)] == [4, 5, 6, 7]


def test_a_non_integer_operand_is_refused_before_the_core():
    """A float slot or row names itself; ``int()`` had truncated fork(1.5) to a fork of slot 1. A bool is no
    slot either: fork(True) had forked slot 1 (``operator.index`` takes True as 1)."""
    kv = golden_driver(16, 4)
    seqs = [kv.new(), kv.new()]
    kv.write_row(seqs[1], 0)
    ops = kv.total_ops
    for call, what in ((lambda: kv.fork(1.5), "kvpage FORK: slot must be an integer, got 1.5"),
                       (lambda: kv.write_row(seqs[1], 1.0), "kvpage WRITE: row must be an integer, got 1.0"),
                       (lambda: kv.rollback([1.5]), "kvpage rollback: a slot must be an integer, got 1.5"),
                       (lambda: kv.fork(True), "kvpage FORK: slot must be an integer, got the bool True"),
                       (lambda: kv.write_row(seqs[1], False), "kvpage WRITE: row must be an integer, got the bool"),
                       (lambda: kv.rollback([seqs[1] == 1]),
                        "kvpage rollback: a slot must be an integer, got the bool")):
        with pytest.raises(ValueError, match=re.escape(what)):
            call()
    assert kv.total_ops == ops and kv.live() == (seqs, [])       # nothing reached the core
    assert kv.fork(seqs[1]) == 2


@pytest.mark.parametrize("notes", [True, False], ids=["python3.11", "python3.10"])
def test_the_page_table_names_the_row_and_the_way_out_when_the_pool_runs_dry(monkeypatch, notes):
    """The torch-free page table (notebook 4 on a PYNQ-Z2) adds a note to the core's POOL_EMPTY: the row, the
    free pages, ``--kv-block`` and ``--dense-kv``. Without PEP 678 (Python 3.10, the Z2 image's) the note also
    ends the message, the only text a 3.10 traceback shows; there ``error.add_note`` had raised AttributeError
    in place of the error."""
    monkeypatch.setattr(errors, "NOTES", notes)
    table = PagedKV(golden_driver(16, 64), block=2)
    with pytest.raises(KVPageError, match="POOL_EMPTY") as exc:
        table.reserve(40)                            # 20 rows of 2 tokens on 16 pages
    (note,) = exc.value.__notes__
    assert "writing row 16 of slot" in note and "0 of 16 pages free" in note and "--dense-kv" in note
    assert (note in str(exc.value)) == (not notes)


def test_an_error_left_by_raw_register_traffic_is_not_blamed_on_the_next_operation():
    """A raw START of an unknown code leaves BAD_OP: the next operation used to report it as its own ("kvpage
    NEW() refused: BAD_OP"). It is refused naming the earlier operation, nothing written; soft_reset() recovers.
    A rollback of one slot number instead of a collection names the value."""
    kv = golden_driver(16, 4)
    seq = kv.new()
    kv.write_fields("OP", CODE=15)
    kv.start()
    with pytest.raises(errors.CoreError, match="still in error from an earlier operation") as e:
        kv.new()
    assert not isinstance(e.value, KVPageError) and e.value.bits == ["BAD_OP"]
    kv.soft_reset()
    assert kv.live() == ([seq], []) and kv.new() == seq + 1
    with pytest.raises(ValueError, match=r"expected the branches' slots \(an iterable of ints\), got 3"):
        kv.rollback(3)


def _table_after_a_round(block: int = 2) -> PagedKV:
    """A page table after a prompt, a branch written past a shared page (copy on write), a commit and a new
    branch with rows of its own."""
    table = PagedKV(golden_driver(16, 8), block=block)
    table.reserve(5)                    # rows 0..2, in the sequence itself
    table.rollback(5)                   # nothing to drop: no operation
    table.open_branch()
    table.reserve(8)                    # row 2 written again (shared: copied), row 3 new
    table.rollback(6)                   # COMMIT
    table.open_branch()
    table.reserve(7)
    return table


def test_a_chain_writes_in_place_and_a_rollback_forks_only_to_drop_rows():
    """With no branch open, the writes go to the sequence (a WRITE a new row, no FORK, no copy); a rollback
    that keeps every row is no operation, one that drops rows is FORK + COMMIT, and the mirror stays the
    core's."""
    kv = golden_driver(16, 8)
    table = PagedKV(kv, block=4)
    table.reserve(6)
    assert table.branch is None and dict(table.ops) == {"new": 1, "write": 2}
    ops = kv.total_ops
    table.rollback(5)
    table.reserve(8)                    # row 1 is the sequence's own: no WRITE
    table.rollback(7)
    assert kv.total_ops == ops and table.length == 7
    table.reserve(13)                   # rows 2 and 3
    table.rollback(6)                   # rows 2 and 3 go back to the pool
    assert table.ops["fork"] == table.ops["commit"] == 1 and table.ops["write"] == 4 and "copy" not in table.ops
    assert len(table.seq_rows) == 2 and kv.free_pages == kv.pages - 2
    table.check()
    table.free()
    assert kv.free_pages == kv.pages


def test_page_table_takes_whole_token_counts_only():
    """A block, an end or a length of 2.5 is named before the core; ``int()`` had made a 2.5-token block one of 2
    tokens, and ``reserve(6.5)`` had written a row for half a token."""
    table = _table_after_a_round()
    state = (table.length, list(table.seq_rows), list(table.branch_rows), table.kv.total_ops)
    for call, what in ((lambda: PagedKV(table.kv, block=2.5), "block must be an integer, got 2.5"),
                       (lambda: table.reserve(8.5), "reserve's end must be an integer, got 8.5"),
                       (lambda: table.rollback(6.0), "rollback's length must be an integer, got 6.0"),
                       (lambda: table.rollback(True), "rollback's length must be an integer, got the bool True")):
        with pytest.raises(ValueError, match=re.escape(f"paged KV cache: {what}")):
            call()
    assert (table.length, table.seq_rows, table.branch_rows, table.kv.total_ops) == state
    table.check()


def test_page_table_mirror_check():
    """``check()`` finds the host's mirror equal to the core's answers (INFO and TRANSLATE of every row), and
    names the first difference once the mirror is wrong: a row's page, a row count."""
    table = _table_after_a_round()
    assert table.ops["copy"] >= 1 and table.branch is not None
    table.check()
    seq, branch = table.seq, table.branch
    table.branch_rows[1] ^= 1
    with pytest.raises(PageTableMismatch, match=rf"row 1 of slot {branch} is page {table.branch_rows[1] ^ 1}, "
                                                rf"the host mirror says {table.branch_rows[1]}"):
        table.check()
    table.branch_rows[1] ^= 1
    table.seq_rows.append(0)
    with pytest.raises(PageTableMismatch, match=rf"slot {seq} has 3 rows, the host mirror 4"):
        table.check()


def _lying(table: PagedKV, monkeypatch, answer) -> None:
    """The table's WRITEs answered by ``answer(slot, row, page, src)`` from the core's true (page, src)."""
    honest = table.kv.write_row
    monkeypatch.setattr(table.kv, "write_row", lambda slot, row: answer(slot, row, *honest(slot, row)))


def test_page_table_refuses_an_append_answered_as_a_copy(monkeypatch):
    table = PagedKV(golden_driver(16, 8), block=2)
    _lying(table, monkeypatch, lambda slot, row, page, src: (page, 0))
    with pytest.raises(PageTableMismatch, match="append of row 0 answered a copy from page 0"):
        table.reserve(1)


@pytest.mark.parametrize("lie, words", [
    ("page", r"row 1 of slot \d+ is page {wrong}, the host mirror says {shared}"),
    ("source", r"copy on write of row 1 from page {wrong}, the host mirror says the row was page {shared}"),
], ids=["page", "source"])
def test_page_table_refuses_answers_that_contradict_its_mirror(lie, words, monkeypatch):
    """Writing a row the branch shares with its sequence: a core answering another page without a copy, or a
    copy from another page than the row's, is refused naming both pages."""
    table = PagedKV(golden_driver(16, 8), block=2)
    table.reserve(3)                        # rows 0 and 1, the second half full
    table.rollback(3)
    table.open_branch()                     # it shares row 1
    shared = table.seq_rows[1]
    wrong = shared + 1
    _lying(table, monkeypatch, lambda slot, row, page, src:
           (wrong, None) if lie == "page" else (page, wrong))
    with pytest.raises(PageTableMismatch, match=words.format(wrong=wrong, shared=shared)):
        table.reserve(4)
