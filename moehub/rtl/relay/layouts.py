"""Payload layouts of the relay's streams (protocol v3): the Amaranth layouts of
:class:`moehub.spec.formats.RelayPorts`' field widths (the relay unit sees a row's target
set once, not its chunks)."""
from amaranth.lib import data

from ...spec.config import HubConfig
from ...spec.formats import RelayPorts


def refuse_without_relay(component, cfg: HubConfig, what: str) -> None:
    """Raise the ValueError every relay unit raises on a config without ``relay: true``
    (naming the key, its value and ``what`` refuses), with Amaranth's unused-component
    warning silenced for the half-built ``component``."""
    if not cfg.relay:
        component._MustUse__silence = True
        raise ValueError(f"hub[{cfg.name}].relay = {cfg.relay}: {what} needs relay: true")


def struct_layout(fields: dict) -> data.StructLayout:
    """The StructLayout of a :class:`~moehub.spec.formats.RelayPorts` field dict (a width,
    or ``(width, count)`` for an array), in its order: low bits first."""
    return data.StructLayout({k: data.ArrayLayout(*f) if isinstance(f, tuple) else f
                              for k, f in fields.items()})


class RelayLayouts:
    """The relay unit's payloads for ``cfg`` (``relay: true``): ``row``, ``open``,
    ``local``, ``fwd``, ``rcredit``, ``fcredit``, ``stage``, ``pstage``, ``pcredit`` -- see
    :class:`~moehub.spec.formats.RelayPorts` for what each carries -- and ``ftag_bits``."""

    def __init__(self, cfg: HubConfig):
        ports = RelayPorts(cfg)
        self.ports = ports
        self.ftag_bits = ports.ftag_bits
        for name in ("row", "open", "local", "fwd", "rcredit", "fcredit", "stage", "pstage", "pcredit"):
            setattr(self, name, struct_layout(getattr(ports, name)))
