"""A job and what runs it in this process: the typed job (:mod:`.job`), its model pair and drafter (:mod:`.pairs`),
running it on a backend's cores and recording its rounds (:mod:`.runner`), and what the notebooks call
(:mod:`.notebook`)."""
