"""specdec's runtime: subpackages by role, each importing only the layers below it (tests/test_layout.py).

::

    errors, paths   leaves: the runtime's exceptions; where its data lives
    hw              hardware access: stream adaptors, drivers, golden models, the overlay, the emulated board
    kv              the paged KV cache: its layout, the page table, the transformers cache in page pools
    models          loading, the CausalLM runtime, kernels, the hot vocabulary, the int8 draft, the corpus
    decoding        the decode loop: shared types, drafters, trees, EAGLE, calibration, metrics
    app             a job: its options, its model pair, running it on a backend's cores, the notebooks' calls
    sim             the RTL in simulation: the cocotb harness and the jobs it runs
    bench           the benchmarks
    cli             the ``specdec`` command line
"""
