# The two commands of the README: `make demo` (the main job) and `make test`.
# Each creates .venv when missing and is idempotent.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test venv clean

$(STAMP): requirements-dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m fusionstitch.cli demo

# tests with wall-clock budgets run alone, so that parallel work does not skew them
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not timing"
	$(PY) -m pytest -q -m timing

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
