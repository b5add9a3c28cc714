#!/usr/bin/env bash
# Install the Debian tools moehub needs when they are missing: Icarus Verilog, Yosys,
# OpenSTA and the OSU 0.18 um standard-cell library. As root they are installed with
# apt-get; otherwise this prints the exact command to run and exits non-zero.
set -euo pipefail
LIB=/usr/share/qflow/tech/osu018/osu018_stdcells.lib
missing=()
command -v iverilog >/dev/null 2>&1 || missing+=(iverilog)
command -v yosys    >/dev/null 2>&1 || missing+=(yosys)
command -v sta      >/dev/null 2>&1 || missing+=(opensta)
[ -f "$LIB" ]                       || missing+=(qflow-tech-osu018)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
cmd="apt-get update && apt-get install -y ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  echo "setup_tools: installing ${missing[*]} from Debian" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "setup_tools: missing ${missing[*]}; run as root:  sudo sh -c '$cmd'" >&2
  exit 1
fi
