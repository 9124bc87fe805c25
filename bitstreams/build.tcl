# Vivado batch build of a specdec overlay: package the converted cores as IP, wire them to the Zynq PS
# over AXI4-Lite, and write <board>/specdec.bit + specdec.hwh for pynq.Overlay.
#
#   specdec hw build                      # writes build/verilog/<core>.v first
#   vivado -mode batch -source bitstreams/build.tcl -tclargs pynq-z2 rng verifier treemask kvpage
#
# Not run in this repository's CI (there is no Vivado here); the VLNV below is the one the pynq
# drivers bind to (specdec.drivers.base.vlnv).
set board [lindex $argv 0]
set cores [lrange $argv 1 end]
if {$board eq ""} { error "usage: -tclargs <pynq-z2|kv260|zcu104> <core> ..." }
if {[llength $cores] == 0} { set cores {rng} }

switch -- $board {
  pynq-z2 { set part xc7z020clg400-1;       set ps processing_system7; set gp M_AXI_GP0;      set hp S_AXI_HP0 }
  kv260   { set part xck26-sfvc784-2LV-c;   set ps zynq_ultra_ps_e;    set gp M_AXI_HPM0_FPD; set hp S_AXI_HP0_FPD }
  zcu104  { set part xczu7ev-ffvc1156-2-e;  set ps zynq_ultra_ps_e;    set gp M_AXI_HPM0_FPD; set hp S_AXI_HP0_FPD }
  default { error "unknown board '$board'; valid: pynq-z2 kv260 zcu104" }
}
set root   [file normalize [file dirname [info script]]/..]
set outdir $root/bitstreams/$board
set ipdir  $root/build/ip
file mkdir $outdir $ipdir

# 1. package each core's Verilog as an IP with the drivers' VLNV
foreach core $cores {
  set v $root/build/verilog/$core.v
  if {![file exists $v]} { error "$v missing: run 'specdec hw build --core $core' first" }
  create_project -in_memory -part $part
  add_files $v
  set_property top $core [current_fileset]
  ipx::package_project -root_dir $ipdir/$core -vendor specdec.dev -library specdec -taxonomy /UserIP \
      -import_files -set_current false
  set c [ipx::open_core $ipdir/$core/component.xml]
  set_property name $core $c
  set_property version 1.0 $c
  ipx::infer_bus_interfaces xilinx.com:interface:aximm_rtl:1.0 $c
  ipx::infer_bus_interfaces xilinx.com:interface:axis_rtl:1.0 $c
  ipx::associate_bus_interfaces -busif s_axil -clock clk $c
  foreach bus {s_axis m_axis} {
    if {[ipx::get_bus_interfaces $bus -of_objects $c] ne ""} {
      ipx::associate_bus_interfaces -busif $bus -clock clk $c
    }
  }
  ipx::save_core $c
  close_project
}

# 2. block design: PS + interconnect + cores
create_project specdec $outdir/vivado -part $part -force
set_property ip_repo_paths $ipdir [current_project]
update_ip_catalog
create_bd_design specdec
set psi [create_bd_cell -type ip -vlnv xilinx.com:ip:$ps ps]
apply_bd_automation -rule xilinx.com:bd_rule:[expr {$ps eq "processing_system7" ? "processing_system7" : "zynq_ultra_ps_e"}] \
    -config {apply_board_preset 1} $psi
foreach core $cores {
  create_bd_cell -type ip -vlnv specdec.dev:specdec:$core:1.0 $core
  apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config "Master /ps/$gp Clk Auto" [get_bd_intf_pins $core/s_axil]
}
# 3. the verifier's logit rows: AXI DMA (MM2S only, simple mode) from pynq.allocate buffers in DDR through
#    the PS's HP port into verifier/s_axis. The cell is named axi_dma: specdec.runtime.pynq_verifier reads
#    Overlay.axi_dma. 64-bit stream = LANES (4) x 16-bit codes; 23-bit length register covers a
#    50272-code row (100,544 bytes).
if {[lsearch $cores verifier] >= 0} {
  set dma [create_bd_cell -type ip -vlnv xilinx.com:ip:axi_dma axi_dma]
  set_property -dict [list CONFIG.c_include_sg 0 CONFIG.c_include_s2mm 0 CONFIG.c_sg_length_width 23 \
      CONFIG.c_m_axis_mm2s_tdata_width 64 CONFIG.c_mm2s_burst_size 64] $dma
  apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config "Master /ps/$gp Clk Auto" [get_bd_intf_pins axi_dma/S_AXI_LITE]
  apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config "Slave /ps/$hp Clk Auto" [get_bd_intf_pins axi_dma/M_AXI_MM2S]
  connect_bd_intf_net [get_bd_intf_pins axi_dma/M_AXIS_MM2S] [get_bd_intf_pins verifier/s_axis]
}
# 4. the treemask core's mask rows: a second AXI DMA (S2MM only) from treemask/m_axis into a
#    pynq.allocate buffer. The cell is named axi_dma_mask (specdec.runtime.pynq_cores reads it); 128-bit
#    words, at most 64 per tree (1 KiB).
if {[lsearch $cores treemask] >= 0} {
  set dmam [create_bd_cell -type ip -vlnv xilinx.com:ip:axi_dma axi_dma_mask]
  set_property -dict [list CONFIG.c_include_sg 0 CONFIG.c_include_mm2s 0 CONFIG.c_sg_length_width 14 \
      CONFIG.c_s_axis_s2mm_tdata_width 128 CONFIG.c_s2mm_burst_size 16] $dmam
  apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config "Master /ps/$gp Clk Auto" [get_bd_intf_pins axi_dma_mask/S_AXI_LITE]
  apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config "Slave /ps/$hp Clk Auto" [get_bd_intf_pins axi_dma_mask/M_AXI_S2MM]
  connect_bd_intf_net [get_bd_intf_pins treemask/m_axis] [get_bd_intf_pins axi_dma_mask/S_AXIS_S2MM]
}
# 5. the kvpage core (KV-cache page table) is register-only: step 2 already wired its s_axil; pynq binds it
#    as Overlay.kvpage (specdec.runtime.pynq_cores). PAGES 256 fits the xc7z020 in BRAM (bench kv).
validate_bd_design
save_bd_design
make_wrapper -files [get_files specdec.bd] -top -import
launch_runs impl_1 -to_step write_bitstream -jobs 4
wait_on_run impl_1
file copy -force [glob $outdir/vivado/specdec.runs/impl_1/*.bit] $outdir/specdec.bit
file copy -force [glob $outdir/vivado/specdec.gen/sources_1/bd/specdec/hw_handoff/*.hwh] $outdir/specdec.hwh
puts "wrote $outdir/specdec.bit and specdec.hwh"
