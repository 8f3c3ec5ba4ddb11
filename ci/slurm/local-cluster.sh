#!/usr/bin/env bash
# A private single-node Slurm (munged, slurmctld, slurmd) under DIR, for trying job arrays on
# one machine (tests/slurm_array_test.sh). Nothing system-wide is used: its own munge key and
# socket, config, state, spool, logs and free TCP ports, all in DIR; run as root.
#   ci/slurm/local-cluster.sh up DIR     # exit 0: ready, `source DIR/env` for sbatch/squeue
#                                        # exit 3: Slurm or munge not installed
#                                        # exit 4: a daemon did not start (logs in DIR/log)
#   ci/slurm/local-cluster.sh down DIR   # cancel its jobs, stop its daemons (idempotent)
set -uo pipefail
cmd=${1:?up or down}
dir=${2:?DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

pid_of() { cat "$dir/$1.pid" 2>/dev/null; }

stop() {  # TERM the named daemons of DIR, KILL what is left after 5 s
  local d p pids=()
  for d in "$@"; do
    p=$(pid_of "$d") && [ -n "$p" ] && kill -TERM "$p" 2>/dev/null && pids+=("$p")
    rm -f "$dir/$d.pid"
  done
  for _ in $(seq 20); do
    p=0; for d in "${pids[@]}"; do kill -0 "$d" 2>/dev/null && p=1; done
    [ $p = 0 ] && return 0
    sleep 0.25
  done
  for d in "${pids[@]}"; do kill -KILL "$d" 2>/dev/null; done
  return 0
}

down() {
  if [ -f "$dir/env" ]; then
    # shellcheck source=/dev/null
    source "$dir/env"
    # Jobs first, while slurmd can still signal their steps.
    if [ -n "$(pid_of slurmctld)" ] && kill -0 "$(pid_of slurmctld)" 2>/dev/null; then
      scancel --quiet --user "$(id -un)" 2>/dev/null
      for _ in $(seq 20); do
        [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
        sleep 0.5
      done
    fi
  fi
  stop slurmd slurmctld  # together, then munge, which they authenticate with
  stop munged
  return 0
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

up() {
  for c in munged slurmctld slurmd sbatch squeue sinfo scancel; do
    command -v $c >/dev/null 2>&1 || { echo "local-cluster: $c not installed"; return 3; }
  done
  down  # a previous cluster in DIR
  mkdir -p "$dir"/{munge,state,spool,log}
  chmod 700 "$dir/munge"
  host=$(hostname -s)
  user=$(id -un)
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  # --force: munged refuses a socket under a world-writable /tmp otherwise.
  munged --foreground --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pidfile" --seed-file="$dir/munge/munged.seed" \
    --log-file="$dir/log/munged.log" >>"$dir/log/munged.log" 2>&1 &
  echo $! >"$dir/munged.pid"

  cat >"$dir/slurm.conf" <<EOF
ClusterName=attnfuzz
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pidfile
SlurmdPidFile=$dir/slurmd.pidfile
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
# No cgroups: plain process tracking, no task binding, no accounting.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MinJobAge=300
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  echo "export SLURM_CONF=$dir/slurm.conf" >"$dir/env"
  export SLURM_CONF=$dir/slurm.conf

  for _ in $(seq 40); do [ -S "$dir/munge/munge.socket" ] && break; sleep 0.25; done
  [ -S "$dir/munge/munge.socket" ] || { echo "local-cluster: munged did not start"; tail -5 "$dir/log/munged.log"; return 4; }
  slurmctld -D -c -f "$dir/slurm.conf" >>"$dir/log/slurmctld.out" 2>&1 &
  echo $! >"$dir/slurmctld.pid"
  slurmd -D -f "$dir/slurm.conf" -N "$host" >>"$dir/log/slurmd.out" 2>&1 &
  echo $! >"$dir/slurmd.pid"
  for _ in $(seq 120); do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null)
    [ "$state" = idle ] && { echo "local-cluster: node $host idle ($(nproc) CPUs), SLURM_CONF=$dir/slurm.conf"; return 0; }
    for d in slurmctld slurmd munged; do
      kill -0 "$(pid_of $d)" 2>/dev/null || { echo "local-cluster: $d exited"; tail -5 "$dir/log/$d.log" "$dir/log/$d.out" 2>/dev/null; return 4; }
    done
    sleep 0.25
  done
  echo "local-cluster: node $host not idle after 30 s (state '${state:-none}')"
  tail -5 "$dir"/log/*.log
  return 4
}

case $cmd in
  up) up || { rc=$?; down; exit $rc; } ;;
  down) down ;;
  *) echo "usage: $0 up|down DIR" >&2; exit 2 ;;
esac
