# Vivado batch build of the specdec overlay for one board: package every core as IP, wire it to the PS,
# feed its streams from AXI DMAs, run implementation at the fabric clock, and write specdec.bit,
# specdec.hwh, timing.rpt and utilization.rpt into bitstreams/<board>/.
#
#   make bitstream BOARD=kv260|pynq-z2          # converts the cores at the board's parameters, then runs:
#   vivado -mode batch -source bitstreams/build.tcl -tclargs <board> <verilog dir> [jobs]
#
# Every name, parameter, width and address comes from bitstreams/<board>/design.tcl, which scripts/gen.py
# renders from hwcontract/board.py (the source the drivers, the runtime and the emulated board's .hwh also
# read; tests/test_board_design.py runs this script against a recording stand-in for Vivado's commands and
# checks it against them). This script has not run on Vivado here: there is no Vivado on this machine.
if {[llength $argv] < 2} { error "usage: vivado -mode batch -source build.tcl -tclargs <board> <verilog dir> \[jobs\]" }
lassign $argv board vdir jobs
if {$jobs eq ""} { set jobs 4 }
set root [file normalize [file dirname [info script]]/..]
set design $root/bitstreams/$board/design.tcl
if {![file exists $design]} { error "no block design for board '$board': $design is missing" }
source $design
set outdir $root/bitstreams/$board
set ipdir  $root/build/$board/ip
file mkdir $outdir $ipdir

# 1. Package each core's Verilog as an IP under the VLNV its driver binds to. clk clocks every interface;
#    rst is active-high and synchronous to clk (declared, so the block design connects an active-high reset).
foreach c $cores {
  lassign $c name module base range streams params
  set v $vdir/$module.v
  if {![file exists $v]} { error "$v missing: `make bitstream BOARD=$board` converts the cores first" }
  create_project -in_memory -part $part
  add_files -norecurse $v
  set_property top $module [current_fileset]
  ipx::package_project -root_dir $ipdir/$name -vendor $ip_vendor -library $ip_library -taxonomy /UserIP \
      -import_files -set_current false
  set ip [ipx::open_core $ipdir/$name/component.xml]
  set_property name $name $ip
  set_property version $ip_version $ip
  set_property display_name "specdec $name ($params)" $ip
  ipx::infer_bus_interfaces xilinx.com:interface:aximm_rtl:1.0 $ip
  ipx::infer_bus_interfaces xilinx.com:interface:axis_rtl:1.0 $ip
  ipx::infer_bus_interfaces xilinx.com:signal:clock_rtl:1.0 $ip
  ipx::infer_bus_interfaces xilinx.com:signal:reset_rtl:1.0 $ip
  set rst [ipx::get_bus_interfaces rst -of_objects $ip]
  if {$rst eq ""} { error "$name: no reset interface inferred on port rst" }
  set_property value ACTIVE_HIGH [ipx::add_bus_parameter POLARITY $rst]
  foreach busif [concat s_axil $streams] {
    if {[ipx::get_bus_interfaces $busif -of_objects $ip] eq ""} { error "$name: bus interface $busif not inferred" }
    ipx::associate_bus_interfaces -busif $busif -clock clk $ip
  }
  ipx::associate_bus_interfaces -clock clk -reset rst $ip
  ipx::create_xgui_files $ip
  ipx::update_checksums $ip
  ipx::check_integrity $ip
  ipx::save_core $ip
  close_project
}

# 2. The block design: the PS at the board's preset, the fabric clock, a reset block whose active-high
#    peripheral_reset drives every core's rst.
create_project specdec $outdir/vivado -part $part -force
set_property board_part $board_part [current_project]
set_property ip_repo_paths $ipdir [current_project]
update_ip_catalog
create_bd_design specdec
set psi [create_bd_cell -type ip -vlnv $ps_vlnv ps]
apply_bd_automation -rule xilinx.com:bd_rule:$ps -config {apply_board_preset 1} $psi
set cfg {}
foreach {key value} $ps_config { lappend cfg CONFIG.$key $value }
set_property -dict $cfg $psi
create_bd_cell -type ip -vlnv xilinx.com:ip:proc_sys_reset:5.0 rst_fclk
connect_bd_net [get_bd_pins $fclk] [get_bd_pins rst_fclk/slowest_sync_clk]
connect_bd_net [get_bd_pins $fclk_resetn] [get_bd_pins rst_fclk/ext_reset_in]

# 3. The cores: each an AXI-Lite slave of the PS's general-purpose master at its address.
foreach c $cores {
  lassign $c name module base range streams params
  create_bd_cell -type ip -vlnv $ip_vendor:$ip_library:$name:$ip_version $name
  connect_bd_net [get_bd_pins $fclk] [get_bd_pins $name/clk]
  connect_bd_net [get_bd_pins rst_fclk/peripheral_reset] [get_bd_pins $name/rst]
  apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Master /ps/$gp Clk Auto] \
      [get_bd_intf_pins $name/s_axil]
  assign_bd_address -offset $base -range $range [get_bd_addr_segs $name/s_axil/*]
}

# 4. One AXI DMA (simple mode) per stream core: MM2S feeds the core's input stream, S2MM takes its output
#    stream, both through the HP port from pynq.allocate buffers. Each memory map is as wide as its stream.
foreach d $dmas {
  lassign $d cell core base mm2s mm2s_width s2mm s2mm_width length_width burst
  create_bd_cell -type ip -vlnv $dma_vlnv $cell
  set cfg [list CONFIG.c_include_sg 0 CONFIG.c_sg_length_width $length_width \
      CONFIG.c_include_mm2s [expr {$mm2s_width > 0}] CONFIG.c_include_s2mm [expr {$s2mm_width > 0}]]
  if {$mm2s_width > 0} {
    lappend cfg CONFIG.c_m_axis_mm2s_tdata_width $mm2s_width CONFIG.c_m_axi_mm2s_data_width $mm2s_width \
        CONFIG.c_mm2s_burst_size $burst
  }
  if {$s2mm_width > 0} {
    lappend cfg CONFIG.c_s_axis_s2mm_tdata_width $s2mm_width CONFIG.c_m_axi_s2mm_data_width $s2mm_width \
        CONFIG.c_s2mm_burst_size $burst
  }
  set_property -dict $cfg [get_bd_cells $cell]
  apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Master /ps/$gp Clk Auto] \
      [get_bd_intf_pins $cell/S_AXI_LITE]
  assign_bd_address -offset $base -range 0x10000 [get_bd_addr_segs $cell/S_AXI_LITE/*]
  if {$mm2s_width > 0} {
    apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Slave /ps/$hp Clk Auto] \
        [get_bd_intf_pins $cell/M_AXI_MM2S]
    connect_bd_intf_net [get_bd_intf_pins $cell/M_AXIS_MM2S] [get_bd_intf_pins $core/$mm2s]
  }
  if {$s2mm_width > 0} {
    apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Slave /ps/$hp Clk Auto] \
        [get_bd_intf_pins $cell/M_AXI_S2MM]
    connect_bd_intf_net [get_bd_intf_pins $core/$s2mm] [get_bd_intf_pins $cell/S_AXIS_S2MM]
  }
}
assign_bd_address
validate_bd_design
save_bd_design

# 5. Implementation at the fabric clock; the reports next to the bitstream; no .bit when timing fails.
make_wrapper -files [get_files specdec.bd] -top -import
launch_runs impl_1 -to_step write_bitstream -jobs $jobs
wait_on_run impl_1
if {[get_property PROGRESS [get_runs impl_1]] ne "100%"} {
  error "implementation of $board did not finish: see $outdir/vivado/specdec.runs/impl_1/runme.log"
}
open_run impl_1
report_timing_summary -file $outdir/timing.rpt
report_utilization -file $outdir/utilization.rpt
set wns [get_property SLACK [lindex [get_timing_paths -max_paths 1 -nworst 1 -setup] 0]]
if {$wns < 0} {
  error "$board misses its $fclk_mhz MHz fabric clock: worst negative slack $wns ns ($outdir/timing.rpt); no bitstream written"
}
file copy -force [lindex [glob $outdir/vivado/specdec.runs/impl_1/*.bit] 0] $outdir/specdec.bit
file copy -force [lindex [glob $outdir/vivado/specdec.gen/sources_1/bd/specdec/hw_handoff/*.hwh] 0] $outdir/specdec.hwh
puts "wrote $outdir/specdec.bit, specdec.hwh, timing.rpt and utilization.rpt (worst slack $wns ns at $fclk_mhz MHz)"
