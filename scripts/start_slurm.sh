#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for `pytest -m slurm` (CI runs it before those tests; run it as root).
#
# Installs Debian's slurmctld, slurmd, slurm-client and munge where sbatch is missing, writes /etc/slurm/slurm.conf
# for this host (all its CPUs, 90% of its memory, one partition `debug`, reached at 127.0.0.1 whatever the host name
# resolves to), starts munged, slurmctld and slurmd where they do not run yet, and waits until the node takes jobs.
# Idempotent: running it again on a running cluster changes nothing (a changed slurm.conf restarts the two SLURM
# daemons this script started, found by their pid files). No systemd, no cgroups, no
# accounting database: lit-marl never asks sacct or submitit for a job's state (the run folder and squeue say it).
#
#   bash scripts/start_slurm.sh        # then: sinfo; sbatch --wrap 'hostname'
set -euo pipefail

PARTITION=${LIT_MARL_SLURM_PARTITION:-debug}
CONF=/etc/slurm/slurm.conf

if [ "$(id -u)" != 0 ]; then
    echo "start_slurm.sh: run as root (it installs packages and starts daemons)" >&2
    exit 1
fi

if ! command -v sbatch >/dev/null || ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
        || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
fi

# munge: the key belongs to munge, mode 0400; its socket folder does not survive a reboot
mkdir -p /run/munge /var/lib/munge /var/log/munge /etc/munge
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile /etc/munge/munge.key
chown -R munge:munge /run/munge /var/lib/munge /var/log/munge /etc/munge
chmod 0400 /etc/munge/munge.key
chmod 0755 /run/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi

HOST=$(hostname -s)
CPUS=$(nproc)
MEMORY_MB=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
NEW_CONF=$(cat <<EOF
# written by lit-marl's scripts/start_slurm.sh: a one-node cluster for tests
ClusterName=litmarl
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
# a requeued job waits cred_expire seconds before it starts again (120 by default)
AuthInfo=cred_expire=10
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
# no systemd, no cgroups: processes tracked by their parent ids, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# schedule pending (and requeued) jobs within seconds, not minutes
SchedulerParameters=sched_interval=2,bf_interval=2
ReturnToService=2
# SIGTERM, then SIGKILL this many seconds later (scancel, time limit): time for a last.ckpt
KillWait=30
MinJobAge=300
MailProg=/bin/true
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEMORY_MB State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
)
CHANGED=0
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$NEW_CONF" ]; then
    printf '%s\n' "$NEW_CONF" > "$CONF"
    CHANGED=1
fi

running() {  # the daemon whose pid file is $1 runs
    [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}
stop() {  # the daemon whose pid file is $1, if it runs (node and partition changes need a restart)
    if running "$1"; then
        kill "$(cat "$1")"
        for _ in $(seq 100); do running "$1" || break; sleep 0.1; done
    fi
}
if [ "$CHANGED" = 1 ]; then
    stop /run/slurmd.pid
    stop /run/slurmctld.pid
fi
running /run/slurmctld.pid || /usr/sbin/slurmctld
running /run/slurmd.pid || /usr/sbin/slurmd

# the node takes jobs: idle (or already busy), not down or drained
for _ in $(seq 150); do
    STATE=$(sinfo -h -n "$HOST" -o %T 2>/dev/null | head -n1 || true)
    case "$STATE" in
        idle|mixed|allocated|completing) break ;;
        down*|drain*|fail*) scontrol update nodename="$HOST" state=resume 2>/dev/null || true ;;
    esac
    sleep 0.2
done
case "$STATE" in
    idle|mixed|allocated|completing) ;;
    *) echo "start_slurm.sh: node $HOST is '${STATE:-unknown}' after 30 s; see /var/log/slurm/" >&2; exit 1 ;;
esac
echo "start_slurm.sh: SLURM runs on $HOST (partition $PARTITION, $CPUS CPUs, $MEMORY_MB MB)"
