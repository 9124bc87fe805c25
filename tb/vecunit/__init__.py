"""cocotb testbenches of the vecunit core."""
