"""hwcontract: the hardware contract of specdec, in one leaf package.

Everything the cores, their golden models, the C++ references, the testbenches and the runtime must agree
on is written here once, and derived everywhere else:

* :mod:`hwcontract.regmap`  - every core's registers, fields, error bits, result groups and stream formats
  (the MyHDL AXI-Lite slave, the pynq drivers, the testbench accessors, the C header and
  docs/registers.md are generated from it);
* :mod:`hwcontract.formats` - the number formats on the wire: logit codes and the host quantizer, the
  inverse temperature, the exp tables, the RNG word layout, the treemask output word;
* :mod:`hwcontract.params`  - one parameter spec per core (names, defaults, allowed values, the error
  message a bad value gets);
* :mod:`hwcontract.tree`    - the parent-array rules of a token tree.

It imports nothing from the project (only the standard library and numpy), so ``fpga``, ``hls_ref``, the
testbenches and the runtime package ``specdec`` all import it, on a build machine and on a PYNQ board.
"""
