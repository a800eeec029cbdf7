#!/usr/bin/env bash
# A real Slurm on this one host (Debian's slurm-wlm and munge; root needed to install and run
# them): slurmctld and slurmd on localhost, then scripts/slurm/parabench.sbatch submitted with
# 2 tasks acting as 2 nodes of 2 CPU ranks each, and the rows checked: a ddp row of world size
# 4 over 2 nodes, and single on node 0. `make slurm-test`; CI runs it after the tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null; }
  install || { apt-get update -q >/dev/null && install; }
fi
D=$(mktemp -d /tmp/parabench-slurm.XXXXXX)
HOST=$(hostname -s)
cleanup() {
  [ -f "$D/slurmd.pid" ] && kill "$(cat "$D/slurmd.pid")" 2>/dev/null || true
  [ -f "$D/slurmctld.pid" ] && kill "$(cat "$D/slurmctld.pid")" 2>/dev/null || true
  [ -f "$D/munged.pid" ] && kill "$(cat "$D/munged.pid")" 2>/dev/null || true
  sleep 1
}
trap cleanup EXIT

# munge: a fresh key and a daemon of our own.
mkdir -p "$D/munge" && chmod 700 "$D/munge"
dd if=/dev/urandom of="$D/munge/munge.key" bs=1 count=1024 status=none && chmod 400 "$D/munge/munge.key"
munged --force --key-file="$D/munge/munge.key" --socket="$D/munge/socket" --pid-file="$D/munged.pid" \
  --log-file="$D/munged.log" --seed-file="$D/munge/seed"

mkdir -p "$D/state" "$D/spool"
cat > "$D/slurm.conf" <<CONF
ClusterName=parabench
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge/socket
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
$(slurmd -C | head -1) State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF="$D/slurm.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 60); do sinfo -h -o %T 2>/dev/null | grep -qE "idle|mix" && break; sleep 1; done
sinfo

OUT="$D/slurm-run.json"
export PY
sbatch --wait --nodes=1 --ntasks=2 --ntasks-per-node=2 --oversubscribe --output="$D/job.out" scripts/slurm/parabench.sbatch \
  --strategies single,ddp --gpus cpu --cpu-replicas 2 --batch-sizes 2 --warmup 0 --steps 2 --trials 1 \
  --startup-timeout 120 --out "$OUT" || { cat "$D/job.out"; exit 1; }
cat "$D/job.out"
"$PY" - "$OUT" <<'CHECK'
import json, sys
rows = {r["strategy"]: r for r in json.load(open(sys.argv[1]))["rows"]}
ddp, single = rows["ddp"], rows["single"]
assert ddp["status"] == "ok", ddp["reason"]
assert (ddp["nnodes"], ddp["world_size"], ddp["global_batch"]) == (2, 4, 8), ddp
assert (single["status"], single["nnodes"]) == ("ok", 1), single
print(f"slurm: ddp over {ddp['nnodes']} nodes, world size {ddp['world_size']}, {ddp['items_per_s']:.1f} img/s; ok")
CHECK
