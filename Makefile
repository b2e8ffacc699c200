# bridgebench developer entry points. `make setup` then `make test`; see README.md.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
CACHE := .cache
# Python 3.12: python3.12 on PATH if it runs, else a pyenv-installed 3.12.x.
PYTHON312 ?= $(shell for p in "$$(command -v python3.12)" $$HOME/.pyenv/versions/3.12*/bin/python3.12; do \
	[ -n "$$p" ] && "$$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { echo "$$p"; break; }; done)

.PHONY: setup test lint site table flops plan check-published lock bench notebooks clean help

include mk/cluster.mk

help:
	@echo "make setup            create $(VENV) (Python 3.12) with the pinned environment"
	@echo "make test             run the test suite"
	@echo "make lint             ruff check + format check, import-linter layer contracts, mypy"
	@echo "make site             the results as static HTML pages into results/site/ (open results/site/index.html)"
	@echo "make table            reproduce the blog's Muon vs AdamW table into results/tables/table1/"
	@echo "make check-published  FLOPs model vs every published perf-table row"
	@echo "make notebooks        execute analysis/*.py notebooks, render HTML into results/notebooks/"
	@echo "make bench            benchmarks (print figures)"
	@echo "make plan             plan the Table 1 runs on the local cluster (ARGS=... for other overrides)"
	@$(MAKE) --no-print-directory cluster-help

setup: $(VENV)/.installed $(CACHE)/mbridge-0.3.1/flop_utils.py cluster-install

$(VENV)/.installed: requirements/base.txt requirements/megatron.txt requirements/constraints.txt pyproject.toml
	@[ -n "$(PYTHON312)" ] || { echo "error: Python 3.12 not found (install it, e.g. 'pyenv install 3.12', or set PYTHON312=/path/to/python3.12)"; exit 1; }
	@free=$$(df -Pk $(dir $(abspath $(VENV))) | awk 'NR==2 {print int($$4 / 1048576)}'); echo "==> $$free GiB free here; the environment takes about 8 GiB (torch's CUDA build from PyPI)"; \
	[ "$$free" -ge 9 ] || echo "warning: under 9 GiB free: pip may stop with 'No space left on device' (free some, or set VENV=/a/larger/disk/venv)"
	@echo "==> creating $(VENV) with $(PYTHON312)"
	[ -x $(PY) ] || $(PYTHON312) -m venv $(VENV)
	$(PIP) install --disable-pip-version-check -q --upgrade pip
	@echo "==> installing pinned dependencies (torch is a large download the first time)"
	$(PIP) install --disable-pip-version-check --progress-bar off -c requirements/constraints.txt -r requirements/base.txt
	@echo "==> installing megatron-core, megatron-bridge, emerging-optimizers (--no-deps)"
	$(PIP) install --disable-pip-version-check --no-deps -c requirements/constraints.txt -r requirements/megatron.txt
	$(PIP) install --disable-pip-version-check --no-deps -e .
	touch $@

# Megatron-Bridge 0.3.1's FLOPs calculator (NeMo 26.02.01), kept only to test analysis/flops.py formula v1 against it.
$(CACHE)/mbridge-0.3.1/flop_utils.py: $(VENV)/.installed
	mkdir -p $(CACHE)/wheels $(CACHE)/mbridge-0.3.1
	$(PIP) download --disable-pip-version-check -q --no-deps megatron-bridge==0.3.1 -d $(CACHE)/wheels
	$(PY) -c "import zipfile, pathlib; z = zipfile.ZipFile('$(CACHE)/wheels/megatron_bridge-0.3.1-py3-none-any.whl'); pathlib.Path('$@').write_bytes(z.read('megatron/bridge/training/utils/flop_utils.py'))"

# Two pytest processes at once: the tests that need the local SLURM cluster (-m slurm: they mostly wait on it, one
# after another) and a few CPU-heavy ones that fill that wait (-m background: the shipped calibration's refit, the
# end-to-end plan / sweep / optstep runs, the ablation rows typed as printed, the site in headless chromium) beside
# the rest, whose progress shows here; the background half's report follows from .state/test-slurm.log. Stop 36
# measured the halves apart on the 2-core AMD EPYC: 33.7 min for the rest with those 7 min of tests in it, 21 min
# for the SLURM ones; side by side 29.5 and 30.5 min at stop 36, 27.2 and 27.2 min at stop 37 (a lighter refit test,
# two optstep repeats instead of three, the site tests moved here). Fails when
# either half fails; Ctrl-C stops both (the background half ignores SIGINT, as any background job of a shell
# without job control, so it is sent SIGTERM).
test: setup
	@mkdir -p .state
	@echo "==> tests that need the local SLURM cluster, and the -m background ones: in the background, report in .state/test-slurm.log"
	@$(VENV)/bin/pytest -q --durations=15 -m "slurm or background" > .state/test-slurm.log 2>&1 & slurm=$$!; \
	trap 'kill $$slurm 2>/dev/null; exit 130' INT TERM; \
	$(VENV)/bin/pytest -q --durations=15 -m "not slurm and not background"; rest=$$?; \
	echo "==> waiting for the background half (SLURM tests)"; wait $$slurm; status=$$?; \
	cat .state/test-slurm.log; \
	[ $$rest -eq 0 ] && [ $$status -eq 0 ]

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy

table: setup
	$(VENV)/bin/bridgebench table

site: setup
	$(VENV)/bin/bridgebench site $(ARGS)

flops: setup
	$(VENV)/bin/bridgebench flops $(ARGS)

check-published: setup
	$(VENV)/bin/bridgebench check-published

plan: setup
	$(VENV)/bin/bridgebench plan experiment=table1 cluster=local $(ARGS)

bench: setup
	$(PY) benchmarks/bench_rules.py
	$(PY) benchmarks/bench_logparse.py
	$(PY) benchmarks/bench_sweep.py
	$(PY) benchmarks/validate_memory.py
	$(PY) benchmarks/validate_time.py
	$(PY) benchmarks/bench_compare_calibration.py
	$(PY) benchmarks/bench_cli.py

# The analysis notebooks (jupytext percent .py) executed headless with nbclient, rendered to HTML with nbconvert.
notebooks: setup
	MPLBACKEND=Agg $(PY) analysis/render_notebooks.py --out results/notebooks

# Regenerate the lock from the current environment.
lock:
	$(PIP) freeze --exclude-editable | grep -v '^bridgebench' > requirements/constraints.txt

clean:
	rm -rf $(VENV) $(CACHE) .pytest_cache .hypothesis
