#!/usr/bin/env bash
# Start a one-node Slurm cluster on this machine (as root) for the Slurm tests:
# munged, slurmctld, slurmd with a generated slurm.conf under $SLURM_STATE.
# Prints `export SLURM_CONF=...` on success. Stop it with scripts/slurm/down.sh (by pid).
set -euo pipefail
STATE=${SLURM_STATE:-/tmp/dlm-slurm}
HOST=$(hostname -s)
CPUS=$(nproc)
MEM=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
for b in munged slurmctld slurmd sinfo sbatch; do
  command -v $b >/dev/null || { echo "slurm: $b not installed (make slurm-deps)" >&2; exit 1; }
done
"$(dirname "$0")/down.sh" >/dev/null 2>&1 || true
rm -rf "$STATE"; mkdir -p "$STATE"/{ctld,spool,munge,log}
# munge: a fresh key, its own socket and pid file.
dd if=/dev/urandom bs=1 count=1024 of="$STATE/munge/munge.key" status=none
chmod 400 "$STATE/munge/munge.key"
chmod 700 "$STATE/munge"
MUNGE_SOCKET="$STATE/munge/munge.socket"
munged --force --key-file="$STATE/munge/munge.key" --socket="$MUNGE_SOCKET" \
  --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/log/munged.log" --seed-file="$STATE/munge/seed"
cat > "$STATE/slurm.conf" <<CONF
ClusterName=dlmtest
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobRequeue=1
MinJobAge=600
KillWait=5
InactiveLimit=0
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$STATE/slurm.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for i in $(seq 1 60); do
  if sinfo -h -o '%T' 2>/dev/null | grep -qE '^idle'; then
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 1
done
echo "slurm: node never became idle; logs in $STATE/log" >&2
sinfo >&2 || true
tail -20 "$STATE"/log/*.log >&2 || true
exit 1
