# The Python venv with the real readers the format tests check our output against.
# Pinned so CI is reproducible; installed from PyPI only.
PY_PKGS := pyarrow==22.0.0 numpy==2.3.5 tokenizers==0.22.1

$(VENV)/.stamp: mk/venv.mk
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q $(PY_PKGS)
	touch $@

.PHONY: venv
venv: $(VENV)/.stamp
TEST_DEPS += venv
