"""cocotb tests of the treemask core (fpga/treemask.py) against its golden model (hls_ref/treemask.py)."""
