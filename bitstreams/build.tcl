# Vivado batch build of the specdec overlay for one board: package every core as IP, wire it to the PS, feed its
# streams from AXI DMAs, and implement it down the board's fabric clock ladder until setup and hold slack both
# close; keep that rung's specdec.bit, specdec.hwh, timing.rpt, utilization.rpt and build.json.
#
#   make bitstream BOARD=kv260|pynq-z2     # scripts/bitstream.sh: checks for Vivado, converts the cores, then
#   vivado -mode batch -log build/<board>/vivado.log -journal build/<board>/vivado.jou \
#          -source bitstreams/build.tcl -tclargs <board> <verilog dir> [jobs]      # run in build/<board>/
#
# Nothing here is pinned to a Vivado release: every Xilinx IP's version comes from the running Vivado's catalog,
# the board part from the board files installed, the fabric clock from the ladder. Vivado's project, runs, logs and
# per-rung reports stay under build/<board>/; the products go to host/specdec/data/overlays/<board>/, and only
# when a rung closes (a failed run leaves none there, not even an older one). Every name, parameter, width, address
# and clock comes from bitstreams/<board>/design.tcl, which scripts/gen.py renders from hwcontract/board.py.
# tests/test_board_design.py runs this script against a stand-in of Vivado's commands that knows each supported
# release's IP catalog and board store (tests/vivado_standin.tcl); it has not run on Vivado itself.
# Tcl 8.5 (Vivado's): no lmap, try or string cat.
if {[llength $argv] < 2} { error "usage: vivado -mode batch -source build.tcl -tclargs <board> <verilog dir> \[jobs\]" }
lassign $argv board vdir jobs
if {$jobs eq ""} { set jobs 4 }
set root [file normalize [file dirname [info script]]/..]
set design $root/bitstreams/$board/design.tcl
if {![file exists $design]} { error "no block design for board '$board': $design is missing" }
source $design
set work $root/build/$board
set products $root/host/specdec/data/overlays/$board
set ipdir $work/ip
set projdir $work/project
set product_files {specdec.bit specdec.hwh timing.rpt utilization.rpt build.json}
file mkdir $work $products
cd $work
foreach f $product_files { file delete -force $products/$f }

proc say {msg} { puts "specdec: $msg" }

# 0. The Vivado that runs: a release the flow was not checked against runs on, with a warning.
set vivado [version -short]
if {![regexp {^[0-9]+\.[0-9]+} $vivado release] || [lsearch -exact $vivado_releases $release] < 0} {
  puts "WARNING: specdec: Vivado $vivado is not one of the releases this flow supports\
      ([join $vivado_releases {, }]); going on with what its IP catalog and board store hold"
}
say "Vivado $vivado building $board ($part)"

# 1. The board part: the newest revision of the board's files found in Vivado's board store (XHub), which batch
#    mode searches only when board.repoPaths names it (as Kria-PYNQ's base design does), or in the folder the
#    environment variable $board_repo_env names.
set repo_paths {}
if {![catch {get_property LOCAL_ROOT_DIR [xhub::get_xstores xilinx_board_store]} store] && $store ne ""} {
  lappend repo_paths $store
}
if {[info exists ::env($board_repo_env)] && $::env($board_repo_env) ne ""} {
  lappend repo_paths [file normalize $::env($board_repo_env)]
}
set_param board.repoPaths $repo_paths
set pattern *$board_family:*
set found [lsort -dictionary [get_board_parts $pattern -latest_file_version]]
if {$found eq ""} {
  set item [lindex [split $board_family :] 1]
  error "no board files for $board: `get_board_parts $pattern -latest_file_version` found none in\
      board.repoPaths \[[join $repo_paths {, }]\]. Install them from Vivado's board store: in the GUI,\
      Tools > Vivado Store > Boards > $item; in Vivado's Tcl console,\
      `xhub::refresh_catalog \[xhub::get_xstores xilinx_board_store\]; xhub::install \[xhub::get_xitems *$item*\]`;\
      or set $board_repo_env to a folder holding them (e.g. boards/ of Xilinx/XilinxBoardStore at the branch of\
      Vivado $vivado)"
}
set board_part [lindex $found end]
say "board part $board_part (get_board_parts $pattern -latest_file_version)"

# 2. Every Xilinx IP at the version this Vivado's catalog holds (the newest), read in a throwaway project of the
#    part; the AXI DMA must be the one version pynq's DMA driver binds to.
proc catalog_vlnvs {vln} {
  global vivado
  set out {}
  foreach def [get_ipdefs -all $vln:*] { lappend out [get_property VLNV $def] }
  if {$out eq ""} {
    error "IP $vln is not in the IP catalog of Vivado $vivado (get_ipdefs -all $vln:* found nothing):\
        install the Vivado release with its IP, or run a release this flow supports"
  }
  return [lsort -dictionary -unique $out]
}
create_project -in_memory -part $part
set ps_vlnv [lindex [catalog_vlnvs $ps_ip] end]
set reset_vlnv [lindex [catalog_vlnvs $reset_ip] end]
set dma_found [catalog_vlnvs $dma_ip]
close_project
if {[lsearch -exact $dma_found $dma_vlnv] < 0} {
  error "the IP catalog of Vivado $vivado holds the AXI DMA as [join $dma_found {, }], and pynq's DMA driver\
      (pynq.lib.dma.DMA) binds only to $dma_vlnv: an overlay built with another version has DMAs pynq does not\
      drive. Build with a Vivado whose catalog holds $dma_vlnv ([join $vivado_releases {, }])"
}
set resolved [list $ps_ip $ps_vlnv $reset_ip $reset_vlnv $dma_ip $dma_vlnv]
foreach {vln vlnv} $resolved { say "IP $vln -> $vlnv" }

# 3. Each core packaged as IP under the VLNV its driver binds to, into a fresh folder (removed first, packaging
#    forced, the core unloaded after packaging and after saving: a second run in the same tree packages again).
#    clk clocks every interface; rst is active-high and synchronous to clk, declared so, so that the block design
#    connects an active-high reset.
foreach c $cores {
  lassign $c name module base range streams params
  set v $vdir/$module.v
  if {![file exists $v]} { error "$v missing: `make bitstream BOARD=$board` converts the cores first" }
  set dir $ipdir/$name
  file delete -force $dir
  create_project -in_memory -part $part
  add_files -norecurse $v
  set_property top $module [current_fileset]
  ipx::package_project -root_dir $dir -vendor $ip_vendor -library $ip_library -taxonomy /UserIP \
      -import_files -set_current false -force
  ipx::unload_core $dir/component.xml
  set ip [ipx::open_core $dir/component.xml]
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
  ipx::unload_core $dir/component.xml
  close_project
}

# 4. The block design, in a project made afresh: the PS at the board's preset (on the Zynq-7000 its DDR and fixed
#    I/O made external by name), its parameters, a reset block whose active-high peripheral_reset drives every
#    core's rst, each core an AXI-Lite slave of the PS's general-purpose master at its address, and one AXI DMA
#    per stream core: MM2S feeds the core's input stream, S2MM takes its output stream, both through the HP port,
#    each memory map as wide as its stream. A DMA with sg 1 runs scatter-gather (c_include_sg 1, no control and
#    status streams) and reads and writes its descriptors through its M_AXI_SG master, on the HP port too.
file delete -force $projdir
create_project specdec $projdir -part $part -force
set_property board_part $board_part [current_project]
set_property ip_repo_paths $ipdir [current_project]
update_ip_catalog
create_bd_design specdec
set psi [create_bd_cell -type ip -vlnv $ps_vlnv ps]
apply_bd_automation -rule xilinx.com:bd_rule:$ps -config $ps_automation $psi
set cfg {}
foreach {key value} $ps_config { lappend cfg CONFIG.$key $value }
set_property -dict $cfg $psi
create_bd_cell -type ip -vlnv $reset_vlnv rst_fclk
connect_bd_net [get_bd_pins $fclk] [get_bd_pins rst_fclk/slowest_sync_clk]
connect_bd_net [get_bd_pins $fclk_resetn] [get_bd_pins rst_fclk/ext_reset_in]

foreach c $cores {
  lassign $c name module base range streams params
  create_bd_cell -type ip -vlnv $ip_vendor:$ip_library:$name:$ip_version $name
  connect_bd_net [get_bd_pins $fclk] [get_bd_pins $name/clk]
  connect_bd_net [get_bd_pins rst_fclk/peripheral_reset] [get_bd_pins $name/rst]
  apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Master /ps/$gp Clk Auto] \
      [get_bd_intf_pins $name/s_axil]
  assign_bd_address -offset $base -range $range [get_bd_addr_segs $name/s_axil/*]
}

foreach d $dmas {
  lassign $d cell core base range mm2s mm2s_width s2mm s2mm_width length_width burst sg
  create_bd_cell -type ip -vlnv $dma_vlnv $cell
  set cfg [list CONFIG.c_include_sg $sg CONFIG.c_sg_length_width $length_width \
      CONFIG.c_include_mm2s [expr {$mm2s_width > 0}] CONFIG.c_include_s2mm [expr {$s2mm_width > 0}]]
  if {$sg} { lappend cfg CONFIG.c_sg_include_stscntrl_strm 0 }
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
  assign_bd_address -offset $base -range $range [get_bd_addr_segs $cell/S_AXI_LITE/*]
  if {$sg} {
    apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Slave /ps/$hp Clk Auto] \
        [get_bd_intf_pins $cell/M_AXI_SG]
  }
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
set cells {}
foreach cell [lsort [get_bd_cells]] { lappend cells [string trimleft $cell /] [get_property VLNV $cell] }
make_wrapper -files [get_files specdec.bd] -top -import

# 5. Down the fabric clock ladder, fastest first: ask the PS for the rung's PL clock 0, check that it makes exactly
#    that rate (the PLL in ps_config is the board firmware's, and pynq on the board rewrites only the divisors),
#    implement, and keep the first rung whose setup (WNS) and hold (WHS) slack both close.
proc slack {kind} {
  set path [get_timing_paths -max_paths 1 -nworst 1 -$kind]
  if {$path eq ""} { error "no $kind timing path in the routed design: the fabric clock is not constrained" }
  return [get_property SLACK $path]
}
set rungs {}
set chosen {}
lassign $pll pll_name pll_mhz
foreach rung $clocks {
  lassign $rung request div0 div1 mhz
  open_bd_design [get_files specdec.bd]
  set psc [get_bd_cells ps]
  set_property -dict [list CONFIG.$fclk_request $request] $psc
  set actual [get_property CONFIG.$fclk_actual $psc]
  set made {}
  foreach key $fclk_divisors { lappend made [get_property CONFIG.$key $psc] }
  if {![string is double -strict $actual] || abs($actual - $mhz) > 1e-5 * $mhz} {
    error "asked for PL clock 0 at $request MHz ($pll_name $pll_mhz MHz / $div0 / $div1, the board's PLL), the PS\
        makes '$actual' MHz (divisors [join $made { x }]): its $pll_name is not the one the board's firmware runs,\
        and pynq on the board rewrites only the divisors. Check the PLL parameters of ps_config in $design; no\
        bitstream written"
  }
  validate_bd_design
  save_bd_design
  if {$rungs ne ""} { reset_run synth_1 }
  say "implementing at $request MHz ($pll_name $pll_mhz MHz / $div0 / $div1)"
  launch_runs impl_1 -to_step write_bitstream -jobs $jobs
  wait_on_run impl_1
  if {[get_property PROGRESS [get_runs impl_1]] ne "100%"} {
    error "implementation of $board at $request MHz did not finish: see $projdir/specdec.runs/impl_1/runme.log"
  }
  open_run impl_1
  set wns [slack setup]
  set whs [slack hold]
  report_timing_summary -file $work/timing_$request.rpt
  report_utilization -file $work/utilization_$request.rpt
  close_design
  set closed [expr {$wns >= 0 && $whs >= 0}]
  lappend rungs [list $request $mhz $div0 $div1 $actual $made $wns $whs $closed]
  say "$request MHz: setup WNS $wns ns, hold WHS $whs ns: [expr {$closed ? {closes} : {misses, next rung}}]"
  if {$closed} { set chosen [lindex $rungs end]; break }
}

# 6. build.json (under build/<board>/ always; beside the bitstream when a rung closed): the Vivado, the board
#    part, every resolved VLNV and every cell's, the clock chosen and the slack of every rung tried.
proc json_str {s} { return "\"[string map [list \\ \\\\ \" \\\" \n \\n \t \\t] $s]\"" }
proc json_num {s} { if {[regexp {^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$} $s]} { return $s }; return [json_str $s] }
proc json_obj {pairs} {
  set out {}
  foreach {k v} $pairs { lappend out "[json_str $k]: $v" }
  return "{[join $out {, }]}"
}
proc json_strs {pairs} {
  set out {}
  foreach {k v} $pairs { lappend out $k [json_str $v] }
  return [json_obj $out]
}
proc json_rung {r} {
  lassign $r request mhz div0 div1 actual made wns whs closed
  return [json_obj [list requested [json_str $request] mhz [json_num $mhz] div0 $div0 div1 $div1 \
      actual_mhz [json_num $actual] ps_divisors "\[[join $made {, }]\]" wns [json_num $wns] whs [json_num $whs] \
      closed [expr {$closed ? "true" : "false"}]]]
}
set tried {}
foreach r $rungs { lappend tried "    [json_rung $r]" }
set top [list board [json_str $board] vivado [json_str $vivado] board_part [json_str $board_part] \
    ips [json_strs $resolved] cells [json_strs $cells] clock [expr {$chosen eq "" ? "null" : [json_rung $chosen]}] \
    rungs "\[\n[join $tried ",\n"]\n  \]"]
set lines {}
foreach {k v} $top { lappend lines "  [json_str $k]: $v" }
set fd [open $work/build.json w]
puts $fd "\{\n[join $lines ",\n"]\n\}"
close $fd

if {$chosen eq ""} {
  set lines {}
  foreach r $rungs {
    lassign $r request mhz div0 div1 actual made wns whs
    lappend lines "$request MHz: WNS $wns ns, WHS $whs ns"
  }
  error "$board closes timing at no rung of its clock ladder ([join $lines {; }]); reports in\
      $work/timing_*.rpt, slacks in $work/build.json; no bitstream written"
}
set request [lindex $chosen 0]
set bits [glob -nocomplain $projdir/specdec.runs/impl_1/*.bit]
set hwhs [glob -nocomplain $projdir/specdec.gen/sources_1/bd/specdec/hw_handoff/*.hwh]
if {[llength $bits] != 1 || [llength $hwhs] != 1} {
  error "after implementing at $request MHz: expected one .bit in $projdir/specdec.runs/impl_1 and one .hwh in\
      $projdir/specdec.gen/sources_1/bd/specdec/hw_handoff, found [concat $bits $hwhs]"
}
file copy -force [lindex $bits 0] $products/specdec.bit
file copy -force [lindex $hwhs 0] $products/specdec.hwh
file copy -force $work/timing_$request.rpt $products/timing.rpt
file copy -force $work/utilization_$request.rpt $products/utilization.rpt
file copy -force $work/build.json $products/build.json
say "wrote [join $product_files {, }] into $products (fabric clock $request MHz)"
