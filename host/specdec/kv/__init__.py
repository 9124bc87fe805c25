"""The paged KV cache: its layout (page sizes that serve a context, :mod:`.layout`), one model's page table on the
kvpage core (:mod:`.pagetable`, no torch) and the transformers cache stored in page pools (:mod:`.paged`)."""
