"""moehub: an open hardware/software co-design kit for MoE-Hub.

Sub-packages: ``moehub.config`` (one configuration schema), ``moehub.rtl`` (Amaranth hub),
``moehub.verif`` (reference model, cocotb testbenches), ``moehub.synth`` (Yosys/OpenSTA
flows), ``moehub.cosim`` (GPU/NVLink co-simulation), ``moehub.scripts`` (command line).
"""

__version__ = "0.1.0"
