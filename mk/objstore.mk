# Object storage (issue #54): the S3-compatible server the tests run against on loopback —
# moto's standalone server from PyPI, pinned, in a venv of its own (its Flask/boto3 stack
# stays out of the readers' .venv). tests/objstore_support starts it per test.
VENV_S3 := .venv-s3
S3_PKGS := moto[server]==5.2.5

$(VENV_S3)/.stamp: mk/objstore.mk
	$(PYTHON) -m venv $(VENV_S3)
	$(VENV_S3)/bin/pip install -q --upgrade pip
	$(VENV_S3)/bin/pip install -q "$(S3_PKGS)"
	$(VENV_S3)/bin/moto_server --help >/dev/null
	touch $@

.PHONY: objstore-venv test-object-store
objstore-venv: $(VENV_S3)/.stamp
TEST_DEPS += objstore-venv

# Only the object-storage tests.
test-object-store: objstore-venv
	$(CARGO) test --test object_store --test object_store_inputs -- --test-threads=2
