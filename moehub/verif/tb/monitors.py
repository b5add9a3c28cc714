"""Monitors of the hub's output ports: every handshake (valid and ready in a cycle) logged
with its cycle and decoded.

:class:`PortMonitor` watches one valid/ready/payload stream -- a data-write lane
(``wr__<j>``: ``(cycle, addr, data)``), the control port (``ctl``: ``(cycle, CtlWrite)``)
or the credit port (``credit``: ``(cycle, src, tag)``); :func:`hub_monitors` makes the
hub's set. The ready a handshake needs is the one the testbench drove in that cycle
(:class:`moehub.verif.tb.drivers.ReadyDriver`), read through ``ready()``.
"""
from __future__ import annotations

from typing import Callable

from ...spec.formats import CtlKind, HubFormats
from ...spec.model import CtlWrite


class PortMonitor:
    """One output stream (see the module docstring). ``decode(payload) -> tuple`` turns the
    payload into the logged fields; :attr:`items` holds ``(cycle, *fields)`` per handshake,
    in order."""

    def __init__(self, valid, payload, ready: Callable[[], int], decode: Callable[[int], tuple]):
        self.valid, self.payload, self._ready, self._decode = valid, payload, ready, decode
        self.items: list[tuple] = []

    def sample(self, cyc: int):
        """Log the handshake of cycle ``cyc``, if there was one; return it (or None)."""
        if int(self.valid.value) and self._ready():
            item = (cyc, *self._decode(self.payload.value.to_unsigned()))
            self.items.append(item)
            return item
        return None

    def clear(self):
        """Forget what was logged (after a reset: outputs in flight are lost with it)."""
        self.items = []


def hub_monitors(dut, lanes: int, fmt: HubFormats, driven: dict):
    """``(write lanes, ctl, credit)`` monitors of the hub top; ``driven`` is the ready
    driver's ``{"wr": [..], "ctl": r, "credit": r}`` of the cycle that just ended."""
    wr_bits = fmt.write

    def write(v):
        w = wr_bits.unpack(v)
        return w["addr"], w["data"]

    def ctl(v):
        c = fmt.ctl.unpack(v)
        return (CtlWrite(CtlKind(c["kind"]), c["addr"], c["data"]),)

    def credit(v):
        c = fmt.credit.unpack(v)
        return c["src"], c["tag"]

    wr = [PortMonitor(getattr(dut, f"wr__{j}__valid"), getattr(dut, f"wr__{j}__payload"),
                      (lambda j=j: driven["wr"][j]), write) for j in range(lanes)]
    return (wr, PortMonitor(dut.ctl__valid, dut.ctl__payload, lambda: driven["ctl"], ctl),
            PortMonitor(dut.credit__valid, dut.credit__payload, lambda: driven["credit"], credit))
