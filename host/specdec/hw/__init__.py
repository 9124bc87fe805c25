"""Hardware access, numpy and pynq only (no torch: a board without it imports the package whole).

* :mod:`.streams`: the stream and register adaptors (row streams, word sinks, the DMA ones, pynq's register device);
* :mod:`.drivers`: one pynq driver per core, bound by VLNV once imported;
* :mod:`.golden`: the golden register models behind the drivers (backend ``ref``); :mod:`.builds`: the project's
  core builds; :mod:`.cores`: a backend's cores, the golden ones;
* :mod:`.hwh`, :mod:`.emuboard`, :mod:`.overlay`: the hardware description, the emulated board, the overlay class
  and a board's cores (backend ``pynq``);
* :mod:`.selftest`: the board self-test; :mod:`.recording`: recorded verifier rounds and their replay.
"""
