"""The RTL in simulation: the cocotb harness (:mod:`.harness`), the simulated devices behind the drivers
(:mod:`.device`, cocotb only), the jobs that run in the simulator (:mod:`.jobs`: backend ``sim``, the emulated board
on the RTL, the cores' benchmarks), the cocotb test modules the simulator runs by name (:mod:`.cocotb_decode`,
:mod:`.cocotb_board`, :mod:`.cocotb_bench`) and the waves profile (:mod:`.waves`)."""
