# A stand-in for the Vivado Tcl commands bitstreams/build.tcl uses, modelled on one Vivado release, for tclsh
# (tests/test_board_design.py). The test sets ::vv before sourcing this file:
#
#   release      what `version -short` answers
#   catalog      the VLNVs of the release's IP catalog (get_ipdefs; create_bd_cell of another VLNV fails)
#   store        the board store's local root (xhub::get_xstores xilinx_board_store, LOCAL_ROOT_DIR)
#   ps           {ref_mhz fbdiv_key div2_key request_key actual_key div0_key div1_key fbdiv div2}: the PS's clock
#                parameters, and the PLL's feedback divisor and halving its board preset sets
#   pll          the PLL rate (MHz) the PS divides, or "" to compute it from its FBDIV/DIV2 parameters (the preset's
#                where the design sets none)
#   timing       {MHz {wns whs} ...}: the slack implementation ends with at each PL clock 0 rate (3 decimals)
#
# Board files are files on disk: a board part is installed under a repository folder as
# <folder>/<vendor>/<board>/<revision>/board_part, holding its name. get_board_parts searches only the folders
# board.repoPaths names (batch mode finds the store's boards only that way: Kria-PYNQ's base design sets it).
# What a rerun in the same tree meets is on disk too: component.xml files (ipx::package_project into a folder that
# holds one fails without -force; ipx::open_core of a core still loaded fails, as package_project leaves it loaded),
# the project (create_project over an existing one fails without -force), the runs' .bit and .hwh, the reports.
#
# Every call is logged on stdout as "CALL " and its words joined by US (0x1f); a command not modelled here is logged
# by `unknown` and returns its last argument, as Vivado's getters hand back the object they are given.
proc log {args} { puts "CALL [join $args \x1f]" }
proc unknown {args} { log {*}$args; return [lindex $args end] }
proc fail {msg} { return -code error "ERROR: $msg" }

array set ::vv {repo_paths {} user_ips {} loaded {} cores {} tops {} cells {} config {} project {} synth fresh
                impl {} run_mhz {} changed 0}
namespace eval ipx {}
namespace eval xhub {}

proc version {args} { log version {*}$args; return $::vv(release) }

proc get_ipdefs {args} {
  log get_ipdefs {*}$args
  set pattern [lindex $args end]
  return [lsearch -all -inline -glob [concat $::vv(catalog) $::vv(user_ips)] $pattern]
}

proc xhub::get_xstores {args} {
  log xhub::get_xstores {*}$args
  if {[lindex $args end] ne "xilinx_board_store"} { return "" }
  return xilinx_board_store
}

proc set_param {name value} {
  log set_param $name $value
  set ::vv(param:$name) $value
}
proc get_param {name} { log get_param $name; return [expr {[info exists ::vv(param:$name)] ? $::vv(param:$name) : ""}] }

# The board parts installed under the folders board.repoPaths names.
proc installed_parts {} {
  set out {}
  set paths [expr {[info exists ::vv(param:board.repoPaths)] ? $::vv(param:board.repoPaths) : ""}]
  foreach dir $paths {
    foreach f [glob -nocomplain -types f -directory $dir */*/*/board_part] {
      set fd [open $f]; lappend out [string trim [read $fd]]; close $fd
    }
  }
  return $out
}

proc get_board_parts {args} {
  log get_board_parts {*}$args
  set pattern [lindex [lsearch -all -inline -not -glob $args -*] 0]
  set parts [lsearch -all -inline -glob [installed_parts] $pattern]
  if {"-latest_file_version" ni $args} { return $parts }
  set newest [dict create]
  foreach p [lsort -dictionary $parts] { dict set newest [join [lrange [split $p :] 0 2] :] $p }
  return [dict values $newest]
}

proc create_project {args} {
  log create_project {*}$args
  if {"-in_memory" in $args} { set ::vv(project) in_memory; return in_memory }
  set words [lsearch -all -inline -not -glob $args -*]
  lassign $words name dir
  if {[file exists $dir/$name.xpr] && "-force" ni $args} {
    fail "\[Vivado 12-1434\] Project '$name' already exists at $dir: use -force to overwrite it"
  }
  file mkdir $dir
  close [open $dir/$name.xpr w]
  array set ::vv [list project $name project_dir $dir synth fresh impl {} run_mhz {} changed 0 cells {} config {}]
  return $name
}
proc close_project {args} { log close_project {*}$args; set ::vv(project) {} }
proc current_project {args} { log current_project {*}$args; return $::vv(project) }
proc current_fileset {args} { log current_fileset {*}$args; return sources_1 }

proc ipx::package_project {args} {
  log ipx::package_project {*}$args
  set dir [lindex $args [expr {[lsearch $args -root_dir] + 1}]]
  if {[file exists $dir/component.xml] && "-force" ni $args} {
    fail "\[IP_Flow 19-1832\] IP root directory $dir already holds component.xml: use -force to overwrite it"
  }
  set vendor [lindex $args [expr {[lsearch $args -vendor] + 1}]]
  set library [lindex $args [expr {[lsearch $args -library] + 1}]]
  file mkdir $dir
  write_core $dir/component.xml $vendor:$library:$::vv(tops):1.0
  lappend ::vv(loaded) $dir/component.xml
}
proc write_core {path vlnv} { set fd [open $path w]; puts $fd $vlnv; close $fd }
proc read_core {path} { set fd [open $path]; set v [string trim [read $fd]]; close $fd; return $v }
proc ipx::open_core {path} {
  log ipx::open_core $path
  if {$path in $::vv(loaded)} { fail "\[IP_Flow 19-3445\] core $path is already open: unload it first" }
  if {![file exists $path]} { fail "\[IP_Flow 19-4] no core at $path" }
  lappend ::vv(loaded) $path
  dict set ::vv(cores) $path [split [read_core $path] :]
  return $path
}
proc ipx::unload_core {path} {
  log ipx::unload_core $path
  set ::vv(loaded) [lsearch -all -inline -not -exact $::vv(loaded) $path]
}
proc ipx::save_core {path} {
  log ipx::save_core $path
  write_core $path [join [dict get $::vv(cores) $path] :]
}
proc ipx::get_bus_interfaces {name args} {
  log ipx::get_bus_interfaces $name {*}$args
  return "$name@[lindex $args end]"
}

proc update_ip_catalog {args} {
  log update_ip_catalog {*}$args
  set ::vv(user_ips) {}
  foreach dir [expr {[info exists ::vv(ip_repo_paths)] ? $::vv(ip_repo_paths) : ""}] {
    foreach f [glob -nocomplain -directory $dir */component.xml] { lappend ::vv(user_ips) [read_core $f] }
  }
}

proc cell_name {obj} { return [string trimleft $obj /] }
proc create_bd_cell {args} {
  log create_bd_cell {*}$args
  set name [lindex $args end]
  if {"-vlnv" in $args} {
    set vlnv [lindex $args [expr {[lsearch $args -vlnv] + 1}]]
    if {$vlnv ni [concat $::vv(catalog) $::vv(user_ips)]} {
      fail "\[BD 5-390\] IP definition not found for VLNV: $vlnv (Vivado $::vv(release))"
    }
    dict set ::vv(cells) $name $vlnv
  }
  return /$name
}
proc get_bd_cells {args} {
  log get_bd_cells {*}$args
  if {$args eq ""} { set out {}; foreach n [dict keys $::vv(cells)] { lappend out /$n }; return $out }
  set name [cell_name [lindex $args end]]
  return [expr {[dict exists $::vv(cells) $name] ? "/$name" : ""}]
}

# Block automation is logged; the AXI automation adds the interconnects this release's catalog holds.
proc apply_bd_automation {args} {
  log apply_bd_automation {*}$args
  set rule [lindex $args [expr {[lsearch $args -rule] + 1}]]
  if {[lindex $args end] eq ""} { fail "\[BD 41-1273\] apply_bd_automation: no object to apply rule $rule to" }
  if {$rule ne "xilinx.com:bd_rule:axi4"} { return }
  set config [lindex $args [expr {[lsearch $args -config] + 1}]]
  lassign [expr {[dict exists $config Master] ? {ps_axi_periph axi_interconnect} : {axi_smc smartconnect}}] cell ip
  if {[dict exists $::vv(cells) $cell]} { return }
  set vlnv [lindex [lsort -dictionary [lsearch -all -inline -glob $::vv(catalog) xilinx.com:ip:$ip:*]] end]
  if {$vlnv eq ""} { fail "\[BD 5-390\] IP definition not found for VLNV: xilinx.com:ip:$ip (Vivado $::vv(release))" }
  dict set ::vv(cells) $cell $vlnv
}

# An AXI DMA's interface pins are the ones its configuration gives it (PG021): M_AXI_SG with scatter-gather, each
# channel's memory-map master and stream with that channel; unset, a parameter is the IP's default (scatter-gather
# and both channels included). get_bd_intf_pins of a pin the cell lacks finds nothing, and the automation or a
# connection given nothing fails, as Vivado's do.
array set ::vv {dma_defaults {CONFIG.c_include_sg 1 CONFIG.c_include_mm2s 1 CONFIG.c_include_s2mm 1}
                dma_pins {M_AXI_SG CONFIG.c_include_sg M_AXI_MM2S CONFIG.c_include_mm2s
                          M_AXIS_MM2S CONFIG.c_include_mm2s M_AXI_S2MM CONFIG.c_include_s2mm
                          S_AXIS_S2MM CONFIG.c_include_s2mm}}
proc get_bd_intf_pins {args} {
  log get_bd_intf_pins {*}$args
  set pin [lindex $args end]
  lassign [split [cell_name $pin] /] cell name
  if {![dict exists $::vv(cells) $cell] || ![string match xilinx.com:ip:axi_dma:* [dict get $::vv(cells) $cell]]
      || ![dict exists $::vv(dma_pins) $name]} { return $pin }
  set cfg $::vv(dma_defaults)
  if {[dict exists $::vv(config) $cell]} { set cfg [dict merge $cfg [dict get $::vv(config) $cell]] }
  return [expr {[dict get $cfg [dict get $::vv(dma_pins) $name]] eq "1" ? $pin : ""}]
}
proc connect_bd_intf_net {args} {
  log connect_bd_intf_net {*}$args
  if {"" in $args} { fail "\[BD 5-106\] Arguments to the connect_bd_intf_net command cannot be empty." }
}

# The PS's PL clock 0: the PLL (from its parameters unless ::vv(pll) says otherwise) divided by the integer nearest
# to PLL / request, split into two 6-bit divisors.
proc ps_clock {} {
  lassign $::vv(ps) ref fbdiv_key div2_key request_key actual_key div0_key div1_key fbdiv div2
  set cfg [expr {[dict exists $::vv(config) ps] ? [dict get $::vv(config) ps] : {}}]
  if {[dict exists $cfg CONFIG.$fbdiv_key]} { set fbdiv [dict get $cfg CONFIG.$fbdiv_key] }
  if {$div2_key ne "" && [dict exists $cfg CONFIG.$div2_key]} { set div2 [dict get $cfg CONFIG.$div2_key] }
  set pll [expr {$::vv(pll) ne "" ? $::vv(pll) : $ref * $fbdiv / ($div2 ? 2.0 : 1.0)}]
  set n [expr {max(1, round($pll / [dict get $cfg CONFIG.$request_key]))}]
  for {set div1 1} {$n % $div1 || $n / $div1 > 63} {incr div1} {}
  return [list [format %.6f [expr {$pll / $n}]] [expr {$n / $div1}] $div1]
}

proc get_property {name args} {
  set obj [lindex $args end]
  if {$name eq "VLNV"} {
    return [expr {[dict exists $::vv(cells) [cell_name $obj]] ? [dict get $::vv(cells) [cell_name $obj]] : $obj}]
  }
  if {$name eq "LOCAL_ROOT_DIR" && $obj eq "xilinx_board_store"} { return $::vv(store) }
  if {$name eq "PROGRESS"} { return [expr {$::vv(impl) ne "" ? "100%" : "0%"}] }
  if {$name eq "SLACK"} {
    set slack {0.25 0.05}
    if {[dict exists $::vv(timing) $::vv(run_mhz)]} { set slack [dict get $::vv(timing) $::vv(run_mhz)] }
    lassign $slack wns whs
    return [expr {$obj eq "path_setup" ? $wns : $whs}]
  }
  if {[string match CONFIG.* $name] && [cell_name $obj] eq "ps"} {
    lassign $::vv(ps) ref fbdiv_key div2_key request_key actual_key div0_key div1_key
    lassign [ps_clock] actual div0 div1
    switch -- $name CONFIG.$actual_key { return $actual } CONFIG.$div0_key { return $div0 } \
        CONFIG.$div1_key { return $div1 }
  }
  if {[string match CONFIG.* $name] && [dict exists $::vv(config) [cell_name $obj] $name]} {
    return [dict get $::vv(config) [cell_name $obj] $name]
  }
  return ""
}

proc set_property {args} {
  log set_property {*}$args
  set obj [lindex $args end]
  if {[lindex $args 0] eq "-dict"} { set pairs [lindex $args 1] } else { set pairs [lrange $args 0 1] }
  foreach {key value} $pairs {
    if {$obj eq "sources_1" && $key eq "top"} { set ::vv(tops) $value; continue }
    if {[dict exists $::vv(cores) $obj]} {
      set vlnv [dict get $::vv(cores) $obj]
      if {$key eq "name"} { dict set ::vv(cores) $obj [lreplace $vlnv 2 2 $value] }
      if {$key eq "version"} { dict set ::vv(cores) $obj [lreplace $vlnv 3 3 $value] }
      continue
    }
    if {$obj eq $::vv(project) && $key eq "board_part"} {
      if {$value ni [installed_parts]} {
        fail "\[Board 49-71\] The board_part definition was not found for $value (board.repoPaths:\
            [get_param board.repoPaths])"
      }
      set ::vv(board_part) $value
      continue
    }
    if {$obj eq $::vv(project) && $key eq "ip_repo_paths"} { set ::vv(ip_repo_paths) $value; continue }
    if {[dict exists $::vv(cells) [cell_name $obj]]} {
      dict set ::vv(config) [cell_name $obj] $key $value
      if {[cell_name $obj] eq "ps" && $::vv(synth) eq "done"} { set ::vv(synth) stale }
    }
  }
}

proc get_files {args} { log get_files {*}$args; return $::vv(project_dir)/specdec.srcs/sources_1/bd/specdec/specdec.bd }
proc get_runs {args} { log get_runs {*}$args; return [lindex $args end] }
proc reset_run {run} {
  log reset_run $run
  if {$run eq "synth_1"} { set ::vv(synth) fresh }
  set ::vv(impl) {}
}

# Implementation at the PS's PL clock 0 as it stands: the .bit, and the .hwh with the PS's parameters as Vivado
# writes them (the rate it requested and the rate it made).
proc launch_runs {args} {
  log launch_runs {*}$args
  if {$::vv(synth) eq "stale"} {
    fail "\[Vivado 12-1088\] synth_1 is out of date (the block design changed): reset_run synth_1"
  }
  if {$::vv(impl) ne ""} { fail "\[Vivado 12-978\] impl_1 has completed: reset it before launching it again" }
  lassign $::vv(ps) ref fbdiv_key div2_key request_key actual_key
  lassign [ps_clock] actual
  set ::vv(run_mhz) [format %.3f $actual]
  set dir $::vv(project_dir)
  file mkdir $dir/specdec.runs/impl_1 $dir/specdec.gen/sources_1/bd/specdec/hw_handoff
  write_core $dir/specdec.runs/impl_1/specdec_wrapper.bit "bitstream at $::vv(run_mhz) MHz"
  set fd [open $dir/specdec.gen/sources_1/bd/specdec/hw_handoff/specdec.hwh w]
  foreach {key value} [dict get $::vv(config) ps] {
    puts $fd "<PARAMETER NAME=\"[string range $key 7 end]\" VALUE=\"$value\"/>"
  }
  puts $fd "<PARAMETER NAME=\"$actual_key\" VALUE=\"$actual\"/>"
  close $fd
  set ::vv(synth) done
  set ::vv(impl) $::vv(run_mhz)
}
proc open_run {args} { log open_run {*}$args; if {$::vv(impl) eq ""} { fail "\[Vivado 12-1106\] impl_1 has not run" } }
proc get_timing_paths {args} {
  log get_timing_paths {*}$args
  return [expr {"-hold" in $args ? "path_hold" : "path_setup"}]
}
proc report_timing_summary {args} { log report_timing_summary {*}$args; report [lindex $args end] timing }
proc report_utilization {args} { log report_utilization {*}$args; report [lindex $args end] utilization }
proc report {path what} {
  set fd [open $path w]; puts $fd "$what report at $::vv(run_mhz) MHz"; close $fd
}
