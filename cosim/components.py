"""TEMPORARY shim of the calibrated component models (replaced by branch calib)."""
from __future__ import annotations


class Components:
    def __init__(self, system):
        self.sys = system
        sw = system.software
        self.launch_us = sw.kernel_launch_us
        self.graph_launch_us = sw.kernel_launch_us
        self.host_sync_us = sw.host_sync_us

    def collective_latency_us(self, kind, peers, nodes):
        return self.sys.software.small_collective_us if peers > 1 else 0.0

    def collective_efficiency(self, msg_bytes_per_peer, inter_node):
        return 1.0

    def small_collective_us(self, peers, nodes, bytes_per_peer=64.0):
        return self.sys.software.small_collective_us if peers > 1 else 0.0

    def put_efficiency(self, msg_bytes, inter_node):
        return 1.0

    def sms_for(self, name):
        sw = self.sys.software
        return sw.comm_sms_hub if name == "hub" else sw.comm_sms_overlap

    def hbm_effective_GBps(self, concurrent_GBps=0.0):
        return self.sys.hbm_GBps * self.sys.software.hbm_efficiency - concurrent_GBps
