#!/usr/bin/env bash
# Stop the daemons scripts/slurm/up.sh started, by the pids it recorded (never by name).
STATE=${SLURM_STATE:-/tmp/dlm-slurm}
for pf in "$STATE/slurmd.pid" "$STATE/slurmctld.pid" "$STATE/munge/munged.pid"; do
  [ -f "$pf" ] || continue
  pid=$(cat "$pf" 2>/dev/null) || continue
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$pf"
done
