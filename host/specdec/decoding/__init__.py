"""Speculative decoding: the shared types (:mod:`.base`, :mod:`.tree`), the row arithmetic (:mod:`.rows`), the
drafters (chains :mod:`.drafters`, trees :mod:`.trees` and :mod:`.sequoia`, the EAGLE head :mod:`.eagle`,
pipelined drafting :mod:`.pipeline`), the calibration statistics (:mod:`.calibration`), the loop (:mod:`.loop`,
with :mod:`.breakeven` and :mod:`.threads`) and its metrics (:mod:`.metrics`)."""
