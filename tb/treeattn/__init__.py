"""cocotb testbenches of the treeattn core."""
