"""The specdec notebooks (installed as ``specdec.notebooks``; the ``pynq.notebooks`` entry point names this
package, so ``pynq get-notebooks specdec`` delivers them, as does ``specdec notebooks DIR``).

See docs/notebooks.md: what each one shows, how it picks its backend, and the cells tagged ``board``.
"""
