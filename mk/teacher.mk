# The trained masked-diffusion teacher benchmark (issue 16), one command on a GPU box with
# Rust, PyTorch and transformers: stage (data from this machine's /usr/share/doc and Python
# stdlib, dlm-data --features cuda, the CPU format check), then train the teacher (~8 min),
# check that distill loads it on CPU and CUDA, and run every distill setting against exact.
# Results (teacher-run.tar.gz, table.md, train.log, ...): bench/results/teacher-<date>/.
# On a GPU box without Rust: bench/teacher/stage.sh elsewhere, then `bash run.sh` there.
.PHONY: bench-teacher
bench-teacher: $(VENV)/.stamp
	DLM_STAGE_DIR=$(abspath target/teacher-bench) PYTHON=$(VENV)/bin/python bash bench/teacher/stage.sh
	OUT=$(abspath bench/results)/teacher-$$(date +%Y%m%d-%H%M) bash target/teacher-bench/run.sh

# CI (no GPU, no torch): a small data build and the checkpoint-format check — a random tiny
# teacher written by the same writer as train.py, read by `dlm-data distill --device cpu` on
# held-out text and MCQ prompts (bench/teacher/tiny_check.py). ~5 s after the build.
.PHONY: teacher-check
teacher-check: $(VENV)/.stamp build
	$(PY) bench/teacher/build_data.py --out target/teacher-check/data --mb 2 --vocab 2048 \
		--mcq-train 300 --cont-train 200 --recall 200 --eval-text 8 --eval-mcq 8
	$(PY) bench/teacher/tiny_check.py --data target/teacher-check/data --bin target/debug/dlm-data \
		--work target/teacher-check/tiny
TEST_DEPS += teacher-check
