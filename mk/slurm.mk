# A real one-node Slurm for the array/merge tests (Debian packages, as root).
SLURM_PKGS := slurmctld slurmd slurm-client munge

.PHONY: slurm-deps test-slurm
slurm-deps:
	@if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || ! command -v sbatch >/dev/null; then \
	  echo "installing $(SLURM_PKGS)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SLURM_PKGS); \
	fi

# Starts the daemons, runs the array tests, stops the daemons by pid whatever happens.
test-slurm: slurm-deps build
	tests/slurm/run.sh
