"""cocotb testbench of the draftengine core."""
