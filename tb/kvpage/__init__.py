"""cocotb tests of the kvpage core (fpga/kvpage.py) against its golden model (hls_ref/kvpage.py)."""
