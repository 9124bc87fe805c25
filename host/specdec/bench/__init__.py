"""The benchmarks behind ``specdec bench``: the cores on the RTL (:mod:`.rtl`), the end-to-end decode
(:mod:`.e2e`, :mod:`.e2e_report`) with its Hugging Face peers (:mod:`.peers`), the draft on the int8 engine
(:mod:`.draft`), and the host they measured on (:mod:`.host`)."""
