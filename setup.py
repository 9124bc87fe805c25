"""specdec's build script: the metadata is in setup.cfg; this file is here for pip 22's editable install.

With a setuptools older than 64 (a PYNQ board's venv: pip 22.0.2, setuptools 59.6), which has no editable hook
(PEP 660), pip installs ``pip install -e .`` through ``setup.py develop``, which links one folder into
site-packages: the checkout's root, where hwcontract, fpga and hls_ref live. The runtime lives under host/
(setup.cfg's ``package_dir``), so :class:`Develop` also writes ``specdec-host.pth``, which puts host/ on
``sys.path`` while the develop link (``specdec.egg-link``) is there: ``pip uninstall specdec`` removes the link,
and the file then adds nothing. ``specdec.notebooks`` (notebooks/) is not importable in such an install (``pip
install .`` installs it). setuptools 64 and later install editable packages through their own finder (PEP 660),
which maps every ``package_dir`` entry, and never run this command.
"""
from __future__ import annotations

import os

from setuptools import setup
from setuptools.command.develop import develop

HOST_PTH = "specdec-host.pth"


class Develop(develop):
    """``setup.py develop``, plus host/ on ``sys.path`` while the develop link is installed."""

    def install_for_development(self) -> None:
        super().install_for_development()
        host = os.path.abspath("host")
        line = (f"import os, sys; os.path.isfile({self.egg_link!r}) and {host!r} not in sys.path and "
                f"sys.path.append({host!r})\n")
        with open(os.path.join(self.install_dir, HOST_PTH), "w", encoding="utf-8") as f:
            f.write(line)

    def uninstall_link(self) -> None:
        super().uninstall_link()
        pth = os.path.join(self.install_dir, HOST_PTH)
        if os.path.isfile(pth):
            os.remove(pth)


setup(cmdclass={"develop": Develop})
