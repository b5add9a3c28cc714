"""Formal proofs of the hub's components with SymbiYosys (``moehub formal``).

One property harness per component (``allocator``, ``queue``, ``tracker``,
``packet_manager``): the component under ``Assume``d inputs (the protocol its neighbours
keep in the hub), reference state tracked by the harness, ``Assert``ed properties and
``Cover``ed interesting states. :mod:`.sets` names the property sets (component x config
x depths), :mod:`.sby` runs one job with ``yowasp-sby``, :mod:`.cli` is the command.
"""
