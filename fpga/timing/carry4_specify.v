// CARRY4 with timing arcs, read by `specdec hw report` (fpga/hw.py) before yosys `sta`.
//
// yosys's xc7 cell library gives CARRY4 no arcs, so `sta` would cut every path at an adder or comparator.
// These arcs put the carry chain back into the logic-only arrival, with approximate 7-series -1 figures
// (carry-in to carry-out 114 ps per 4 bits; a LUT's select or DI into the chain 400-450 ps). They are
// estimates for comparing designs and pipelining, not a sign-off: there is no routing in the figure.
(* blackbox *)
module CARRY4(output [3:0] CO, output [3:0] O, input CI, input CYINIT, input [3:0] DI, input [3:0] S);
  specify
    (CI *> CO) = 114; (CI *> O) = 200; (CYINIT *> CO) = 114; (CYINIT *> O) = 200;
    (DI *> CO) = 400; (DI *> O) = 450; (S *> CO) = 400; (S *> O) = 450;
  endspecify
endmodule
