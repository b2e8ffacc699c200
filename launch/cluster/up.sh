#!/usr/bin/env bash
# Start (or resume, or repair) the local single-node SLURM cluster:
#   munged -> private MariaDB -> slurmdbd -> sacctmgr cluster/account/user -> slurmctld -> slurmd
# Everything (configs, keys, database, spool, logs, pid files) lives in the state directory,
# default <repo>/.state/slurm (env BRIDGEBENCH_SLURM_STATE), any folder (private 0700 or under /tmp);
# the daemons' sockets in a runtime folder munged accepts (common.sh RUN_DIR: /run/bridgebench-<uid>/...).
# Idempotent: running daemons are kept, missing/dead ones are (re)started, stale pid files
# and sockets are cleaned up. On a failure, every daemon this run started is stopped again (no
# half-started cluster is left running) and the error says why. Stop with down.sh (state is kept;
# down.sh --purge deletes it).
set -euo pipefail
LOG_TAG=up
# shellcheck source=launch/cluster/common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

T0="$(now)"
umask 022  # munged refuses group/world-writable socket directories

# ---------------------------------------------------------------- preflight
missing=()
for cmd in munged mungekey munge mariadbd mariadb-install-db mariadb mariadb-admin \
           slurmdbd slurmctld slurmd sinfo sacctmgr scontrol; do
  command -v "${cmd}" >/dev/null 2>&1 || missing+=("${cmd}")
done
if [[ "${#missing[@]}" -gt 0 ]]; then
  die "missing commands: ${missing[*]} -- run launch/cluster/install.sh (as root) first"
fi

RUN_USER="$(id -un)"
HOST="$(hostname -s)"
CPUS="$(nproc)"
MEM_TOTAL_MB="$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)"
# Headroom for the OS and the daemons: 10%, at least 512 MiB.
HEADROOM_MB="$(( MEM_TOTAL_MB / 10 > 512 ? MEM_TOTAL_MB / 10 : 512 ))"
MEM_MB="$(( MEM_TOTAL_MB - HEADROOM_MB ))"
[[ "${MEM_MB}" -ge 256 ]] || MEM_MB=256

# GPUs: real /dev/nvidiaN devices if any, else 8 fake ones (BRIDGEBENCH_SLURM_GPUS overrides the count).
mapfile -t REAL_GPUS < <(find /dev -maxdepth 1 -regex '/dev/nvidia[0-9]+' 2>/dev/null | sort -V)
NGPUS="${BRIDGEBENCH_SLURM_GPUS:-$(( ${#REAL_GPUS[@]} > 0 ? ${#REAL_GPUS[@]} : 8 ))}"
[[ "${NGPUS}" =~ ^[0-9]+$ ]] || die "BRIDGEBENCH_SLURM_GPUS must be a number (got '${NGPUS}')"

# Memory confinement (slurm.conf.in), BRIDGEBENCH_SLURM_CGROUP: none (default) -> task/none, memory not enforced;
# v1 -> task/cgroup with the kernel's memory cgroup v1 (a VM or a host where root may make the slurm/ group; not
# gVisor or docker without cgroup delegation), so a job over its --mem ends OUT_OF_MEMORY; auto -> v1 where
# possible. Opt-in because Slurm 22.05's task/cgroup sometimes failed to start a job here (slurmstepd:
# "task_g_pre_setuid: task/cgroup: Unspecified error", twice in ~40 chained jobs), and slurmctld then drains the
# only node; the OOM tests switch it on for themselves (tests/launch/test_local_cluster.py confined_memory).
CGROUP_MODE="${BRIDGEBENCH_SLURM_CGROUP:-none}"
MEMCG=/sys/fs/cgroup/memory
case "${CGROUP_MODE}" in
  auto|v1)
    if [[ -f "${MEMCG}/memory.limit_in_bytes" ]] && mkdir -p "${MEMCG}/slurm" 2>/dev/null && [[ -w "${MEMCG}/slurm" ]]; then
      CGROUP_MODE=v1
    elif [[ "${CGROUP_MODE}" == v1 ]]; then
      die "BRIDGEBENCH_SLURM_CGROUP=v1 but ${MEMCG} is not a writable cgroup v1 memory hierarchy"
    else
      CGROUP_MODE=none
    fi ;;
  none) ;;
  *) die "BRIDGEBENCH_SLURM_CGROUP must be auto, v1 or none (got '${CGROUP_MODE}')" ;;
esac
if [[ "${CGROUP_MODE}" == v1 ]]; then
  TASK_PLUGIN=task/cgroup
  CGROUP_NOTE="cgroup v1 memory at ${MEMCG}: jobs are confined to their memory"
else
  TASK_PLUGIN=task/none
  CGROUP_NOTE="task/none (BRIDGEBENCH_SLURM_CGROUP=${BRIDGEBENCH_SLURM_CGROUP:-none}): memory is not enforced"
fi
MEM_PER_CPU="$(( MEM_MB / CPUS ))"
[[ "${PORT_BASE}" =~ ^[0-9]+$ && "${PORT_BASE}" -le 65535 ]] || die "BRIDGEBENCH_SLURM_PORT_BASE must be a port number (got '${PORT_BASE}')"
FIRST_JOB_ID="$(( PORT_BASE * 1000 ))"

log "state dir ${STATE} (node ${HOST}: ${CPUS} CPUs, RealMemory=${MEM_MB} MB of ${MEM_TOTAL_MB}, ${NGPUS} GPUs; ports ${CTLD_PORT}-${MYSQL_PORT}; ${TASK_PLUGIN})"
take_lock
# The daemons started by this run: stopped again, newest first, if the run fails after starting them.
STARTED=()
stop_started_on_failure() {
  local rc=$? i
  trap - EXIT
  if [[ "${rc}" -ne 0 && "${#STARTED[@]}" -gt 0 ]]; then
    log "failed (exit ${rc}): stopping what this run started (${STARTED[*]}), so no daemon is left running" >&2
    for (( i = ${#STARTED[@]} - 1; i >= 0; i-- )); do stop_daemon "${STARTED[i]}" 20 >&2 || true; done
    rm -f "${MUNGE_SOCKET}" "${MUNGE_SOCKET}.lock" "${MYSQL_SOCKET}" "${MYSQL_SOCKET}.lock"
  fi
  exit "${rc}"
}
trap stop_started_on_failure EXIT
make_run_dir "${RUN_DIR}" BRIDGEBENCH_SLURM_RUN_DIR munge_dir_problem
mkdir -p "${STATE}"/{etc,run,log,lib,mysql,dev,spool/slurmctld,spool/slurmd}
chmod 700 "${STATE}/etc" "${STATE}/lib"
[[ -e "${MARKER_FILE}" ]] || printf 'bridgebench local SLURM state (launch/cluster/up.sh); safe to delete with down.sh --purge\n' >"${MARKER_FILE}"
# The identity of this cluster state: job ids restart at 1 after a purge, so bridgebench keys its records by this
# UUID + the job id (configs/cluster/local.yaml identity_file). Made once per state; a purge makes a new one.
[[ -s "${ID_FILE}" ]] || { cat /proc/sys/kernel/random/uuid >"${ID_FILE}.tmp" && mv -f "${ID_FILE}.tmp" "${ID_FILE}"; log "cluster id $(cat "${ID_FILE}")"; }
cd "${STATE}"

# ---------------------------------------------------------------- configs
DB_PASS_FILE="${STATE}/etc/db.pass"
if [[ ! -s "${DB_PASS_FILE}" ]]; then
  (umask 077; od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"${DB_PASS_FILE}")
fi
DB_PASS="$(cat "${DB_PASS_FILE}")"

GRES_LINES=""
NODE_GRES=""
n_real=0
for (( i = 0; i < NGPUS; i++ )); do
  if [[ "${i}" -lt "${#REAL_GPUS[@]}" ]]; then
    dev="${REAL_GPUS[${i}]}"
    n_real=$((n_real + 1))
  else
    dev="${STATE}/dev/fakegpu${i}"
    [[ -L "${dev}" ]] || ln -sfn /dev/null "${dev}"
  fi
  GRES_LINES+="NodeName=${HOST} Name=gpu File=${dev}"$'\n'
done
if [[ "${NGPUS}" -gt 0 ]]; then
  NODE_GRES="Gres=gpu:${NGPUS} "
  GPU_DESC="${NGPUS} GPUs (${n_real} real, $((NGPUS - n_real)) fake)"
else
  GPU_DESC="none"
fi

sed_escape() { printf '%s' "$1" | sed -e 's/[\\|&]/\\&/g'; }
# render TEMPLATE OUTPUT MODE [EXTRA]: substitute @VARS@, append EXTRA; returns 0 if OUTPUT changed.
render() {
  local src="${CLUSTER_DIR}/$1" dst="${STATE}/etc/$2" mode="$3" extra="${4:-}" tmp
  tmp="$(mktemp "${dst}.XXXXXX")"
  sed -e "s|@STATE@|$(sed_escape "${STATE}")|g" \
      -e "s|@CLUSTER@|$(sed_escape "${CLUSTER}")|g" \
      -e "s|@HOST@|$(sed_escape "${HOST}")|g" \
      -e "s|@USER@|$(sed_escape "${RUN_USER}")|g" \
      -e "s|@CPUS@|${CPUS}|g" -e "s|@MEM_MB@|${MEM_MB}|g" \
      -e "s|@CTLD_PORT@|${CTLD_PORT}|g" -e "s|@SLURMD_PORT@|${SLURMD_PORT}|g" \
      -e "s|@DBD_PORT@|${DBD_PORT}|g" -e "s|@MYSQL_PORT@|${MYSQL_PORT}|g" \
      -e "s|@DB_PASS@|$(sed_escape "${DB_PASS}")|g" \
      -e "s|@NODE_GRES@|$(sed_escape "${NODE_GRES}")|g" \
      -e "s|@GPU_DESC@|$(sed_escape "${GPU_DESC}")|g" \
      -e "s|@TASK_PLUGIN@|${TASK_PLUGIN}|g" -e "s|@CGROUP_NOTE@|$(sed_escape "${CGROUP_NOTE}")|g" \
      -e "s|@MEM_PER_CPU@|${MEM_PER_CPU}|g" -e "s|@FIRST_JOB_ID@|${FIRST_JOB_ID}|g" \
      -e "s|@MUNGE_SOCKET@|$(sed_escape "${MUNGE_SOCKET}")|g" -e "s|@MYSQL_SOCKET@|$(sed_escape "${MYSQL_SOCKET}")|g" \
      "${src}" >"${tmp}"
  printf '%s' "${extra}" >>"${tmp}"
  chmod "${mode}" "${tmp}"
  if [[ -f "${dst}" ]] && cmp -s "${tmp}" "${dst}"; then
    rm -f "${tmp}"
    return 1
  fi
  mv -f "${tmp}" "${dst}"
  log "wrote ${dst}"
  return 0
}
changed_my=0; changed_dbd=0; changed_slurm=0
render my.cnf.in my.cnf 600 && changed_my=1
render slurmdbd.conf.in slurmdbd.conf 600 && changed_dbd=1
render slurm.conf.in slurm.conf 644 && changed_slurm=1
render gres.conf.in gres.conf 644 "${GRES_LINES}" && changed_slurm=1
if [[ "${CGROUP_MODE}" == v1 ]]; then
  render cgroup.conf.in cgroup.conf 644 && changed_slurm=1
elif [[ -e "${STATE}/etc/cgroup.conf" ]]; then
  rm -f "${STATE}/etc/cgroup.conf"; changed_slurm=1
fi

export SLURM_CONF="${SLURM_CONF_FILE}"
MYCNF="${STATE}/etc/my.cnf"

# spawn CMD...: run a daemon with a clean environment carrying SLURM_CONF and the MARK.
spawn() {
  env -i PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    HOME="${HOME:-/root}" LANG=C.UTF-8 SLURM_CONF="${SLURM_CONF_FILE}" "${MARK}" "$@" 9>&-
}

# A config that changed under a running daemon: restart that daemon.
[[ "${changed_slurm}" == 1 ]] && for d in slurmd slurmctld; do
  [[ -z "$(daemon_pid "${d}")" ]] || { log "slurm.conf changed: restarting ${d}"; stop_daemon "${d}" 20; }
done
[[ "${changed_dbd}" == 1 && -n "$(daemon_pid slurmdbd)" ]] && { log "slurmdbd.conf changed: restarting slurmdbd"; stop_daemon slurmdbd 20; }
[[ "${changed_my}" == 1 && -n "$(daemon_pid mariadbd)" ]] && { log "my.cnf changed: restarting mariadbd"; stop_daemon mariadbd 30; }

# port_free PORT: nothing listening on 127.0.0.1:PORT / *:PORT.
port_free() {
  ! ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}
check_port() {
  port_free "$2" || die "port $2 (for $1) is already in use by another process; stop it or set BRIDGEBENCH_SLURM_PORT_BASE"
}

# ---------------------------------------------------------------- munged
munge_ok() { munge -n -S "${MUNGE_SOCKET}" </dev/null | unmunge -S "${MUNGE_SOCKET}" >/dev/null 2>&1; }
if [[ ! -s "${STATE}/etc/munge.key" ]]; then
  mungekey --create --keyfile="${STATE}/etc/munge.key" >/dev/null
  chmod 600 "${STATE}/etc/munge.key"
  log "created munge key"
fi
pid="$(daemon_pid munged)"
if [[ -n "${pid}" ]] && munge_ok; then
  log "munged already running (pid ${pid})"
else
  [[ -z "${pid}" ]] || stop_daemon munged 10
  rm -f "${MUNGE_SOCKET}" "${MUNGE_SOCKET}.lock" "${STATE}/run/munged.pid"
  t="$(now)"
  STARTED+=(munged)
  # munged says why it refuses to start on stderr (and in its log): that line goes into the error.
  munged_err="$(spawn munged --socket="${MUNGE_SOCKET}" --key-file="${STATE}/etc/munge.key" \
    --pid-file="${STATE}/run/munged.pid" --log-file="${STATE}/log/munged.log" \
    --seed-file="${STATE}/lib/munged.seed" </dev/null 2>&1 >/dev/null)" \
    || die "munged failed to start: $(printf '%s' "${munged_err}" | tr '\n' ' ')(log: ${STATE}/log/munged.log)"
  wait_until 10 "munged" munge_ok \
    || die "munged not answering on ${MUNGE_SOCKET}: $(grep -E 'Error|Fatal' "${STATE}/log/munged.log" 2>/dev/null | tail -n 1)"
  log "started munged (pid $(daemon_pid munged)) in $(elapsed "${t}")s"
fi

# ---------------------------------------------------------------- MariaDB (private)
sql() { mariadb --defaults-file="${MYCNF}" --batch --skip-column-names -e "$1"; }
mysql_ok() { mariadb-admin --defaults-file="${MYCNF}" --connect-timeout=2 status >/dev/null 2>&1; }
pid="$(daemon_pid mariadbd)"
if [[ -n "${pid}" ]] && mysql_ok; then
  log "mariadbd already running (pid ${pid})"
else
  if [[ -n "${pid}" ]]; then
    log "mariadbd (pid ${pid}) not answering: restarting it"
    stop_daemon mariadbd 30
  fi
  rm -f "${MYSQL_SOCKET}" "${MYSQL_SOCKET}.lock" "${STATE}/run/mariadbd.pid"
  if [[ ! -e "${STATE}/mysql/.bridgebench-initialized" ]]; then
    # Fresh (or half-initialized) data directory: (re)create it.
    t="$(now)"
    rm -rf "${STATE}/mysql"
    mkdir -p "${STATE}/mysql"
    mariadb-install-db --defaults-file="${MYCNF}" --skip-test-db \
      --auth-root-authentication-method=socket --auth-root-socket-user="${RUN_USER}" \
      >"${STATE}/log/mariadb-install-db.log" 2>&1 \
      || die "mariadb-install-db failed; see ${STATE}/log/mariadb-install-db.log"
    log "initialized MariaDB data dir in $(elapsed "${t}")s"
  fi
  check_port mariadbd "${MYSQL_PORT}"
  t="$(now)"
  STARTED+=(mariadbd)
  spawn setsid -f mariadbd --defaults-file="${MYCNF}" </dev/null >>"${STATE}/log/mariadbd.log" 2>&1
  wait_until 60 "mariadbd" mysql_ok || { tail -n 20 "${STATE}/log/mariadbd.log" >&2 || true; die "mariadbd did not start; see ${STATE}/log/mariadbd.log"; }
  log "started mariadbd (pid $(daemon_pid mariadbd)) in $(elapsed "${t}")s"
fi
# Database and user for slurmdbd (idempotent; also re-syncs the password).
for h in 127.0.0.1 localhost; do
  sql "CREATE USER IF NOT EXISTS 'slurm'@'${h}' IDENTIFIED BY '${DB_PASS}';
       ALTER USER 'slurm'@'${h}' IDENTIFIED BY '${DB_PASS}';
       GRANT ALL ON slurm_acct_db.* TO 'slurm'@'${h}';" \
    || die "could not create the slurm database user"
done
sql "CREATE DATABASE IF NOT EXISTS slurm_acct_db;" || die "could not create slurm_acct_db"
touch "${STATE}/mysql/.bridgebench-initialized"

# ---------------------------------------------------------------- slurmdbd
dbd_ok() { sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1; }
pid="$(daemon_pid slurmdbd)"
if [[ -n "${pid}" ]] && dbd_ok; then
  log "slurmdbd already running (pid ${pid})"
else
  [[ -z "${pid}" ]] || { log "slurmdbd (pid ${pid}) not answering: restarting it"; stop_daemon slurmdbd 20; }
  check_port slurmdbd "${DBD_PORT}"
  t="$(now)"
  STARTED+=(slurmdbd)
  spawn slurmdbd </dev/null >>"${STATE}/log/slurmdbd.log" 2>&1 \
    || die "slurmdbd failed to start; see ${STATE}/log/slurmdbd.log"
  wait_until 60 "slurmdbd" dbd_ok || { tail -n 20 "${STATE}/log/slurmdbd.log" >&2 || true; die "slurmdbd not answering; see ${STATE}/log/slurmdbd.log"; }
  log "started slurmdbd (pid $(daemon_pid slurmdbd)) in $(elapsed "${t}")s"
fi

# ---------------------------------------------------------------- accounting objects
USERS=("${RUN_USER}")
[[ -n "${SUDO_USER:-}" && "${SUDO_USER}" != "${RUN_USER}" ]] && USERS+=("${SUDO_USER}")
assocs="$(sacctmgr -n -P show assoc format=cluster,account,user 2>/dev/null || true)"
if ! grep -q "^${CLUSTER}|" <<<"${assocs}" \
   && ! sacctmgr -n -P show cluster format=cluster | grep -qxF "${CLUSTER}"; then
  sacctmgr -i add cluster "${CLUSTER}" >/dev/null
  log "sacctmgr: added cluster ${CLUSTER}"
fi
if ! grep -q "^${CLUSTER}|${ACCOUNT}|$" <<<"${assocs}"; then
  sacctmgr -i add account "${ACCOUNT}" Cluster="${CLUSTER}" \
    Description="bridgebench local cluster" Organization=bridgebench >/dev/null
  log "sacctmgr: added account ${ACCOUNT}"
fi
for u in "${USERS[@]}"; do
  if ! grep -q "^${CLUSTER}|${ACCOUNT}|${u}$" <<<"${assocs}"; then
    sacctmgr -i add user "${u}" Account="${ACCOUNT}" DefaultAccount="${ACCOUNT}" Cluster="${CLUSTER}" >/dev/null
    log "sacctmgr: added user ${u} (default account ${ACCOUNT})"
  fi
done

# ---------------------------------------------------------------- slurmctld, slurmd
ctld_ok() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
pid="$(daemon_pid slurmctld)"
if [[ -n "${pid}" ]] && ctld_ok; then
  log "slurmctld already running (pid ${pid})"
else
  [[ -z "${pid}" ]] || { log "slurmctld (pid ${pid}) not answering: restarting it"; stop_daemon slurmctld 20; }
  check_port slurmctld "${CTLD_PORT}"
  t="$(now)"
  STARTED+=(slurmctld)
  spawn slurmctld </dev/null >>"${STATE}/log/slurmctld.log" 2>&1 \
    || die "slurmctld failed to start; see ${STATE}/log/slurmctld.log"
  wait_until 30 "slurmctld" ctld_ok || { tail -n 20 "${STATE}/log/slurmctld.log" >&2 || true; die "slurmctld not answering; see ${STATE}/log/slurmctld.log"; }
  log "started slurmctld (pid $(daemon_pid slurmctld)) in $(elapsed "${t}")s"
fi

SLURMD_STARTED_AT=""
pid="$(daemon_pid slurmd)"
if [[ -n "${pid}" ]]; then
  log "slurmd already running (pid ${pid})"
else
  check_port slurmd "${SLURMD_PORT}"
  t="$(now)"
  SLURMD_STARTED_AT="$(date +%s)"
  STARTED+=(slurmd)
  spawn slurmd -N "${HOST}" </dev/null >>"${STATE}/log/slurmd.log" 2>&1 \
    || die "slurmd failed to start; see ${STATE}/log/slurmd.log"
  log "started slurmd (pid $(daemon_pid slurmd)) in $(elapsed "${t}")s"
fi

# ---------------------------------------------------------------- readiness
node_state() { sinfo -h -N -n "${HOST}" -o '%T' 2>/dev/null | head -n1; }
# A freshly started slurmd has registered once slurmctld reports its new SlurmdStartTime
# (right after a slurmctld restart the node state comes from the saved state file).
slurmd_registered() {
  [[ -n "${SLURMD_STARTED_AT}" ]] || return 0
  local st
  st="$(scontrol -o show node "${HOST}" 2>/dev/null | grep -o 'SlurmdStartTime=[^ ]*' | cut -d= -f2)"
  [[ -n "${st}" && "${st}" != None ]] || return 1
  [[ "$(date -d "${st}" +%s)" -ge "${SLURMD_STARTED_AT}" ]]
}
node_ready() { slurmd_registered && [[ "$(node_state)" =~ ^(idle|mixed|allocated|completing)$ ]]; }
t="$(now)"
if ! wait_until 5 "node ${HOST} to become idle" node_ready; then
  st="$(node_state)"
  if [[ "${st}" =~ down|drain|fail ]]; then
    log "node ${HOST} is '${st}' ($(sinfo -h -N -n "${HOST}" -o '%E')): resuming it"
    scontrol update NodeName="${HOST}" State=RESUME || true
  fi
  wait_until 30 "node ${HOST} to become idle" node_ready || {
    sinfo -N -l >&2 || true
    tail -n 20 "${STATE}/log/slurmd.log" >&2 || true
    die "node ${HOST} not ready (state '$(node_state)'); see ${STATE}/log/slurmd.log and slurmctld.log"
  }
fi
log "node ${HOST} is $(node_state) (waited $(elapsed "${t}")s)"
cluster_registered() {
  sacctmgr -n -P show cluster format=cluster,controlhost | grep -qE "^${CLUSTER}\|.+"
}
wait_until 30 "slurmctld to register cluster ${CLUSTER} with slurmdbd" cluster_registered \
  || die "cluster ${CLUSTER} not registered in slurmdbd; see ${STATE}/log/slurmctld.log"
log "sacctmgr lists cluster ${CLUSTER} ($(sacctmgr -n -P show cluster format=controlhost,controlport | head -n1))"

cat <<EOF
[cluster up] local SLURM cluster '${CLUSTER}' is up in $(elapsed "${T0}")s
  use it:   eval "\$(${CLUSTER_DIR}/env.sh)"      # or: export SLURM_CONF=${SLURM_CONF_FILE}
  try:      sinfo; sbatch -A ${ACCOUNT} -p local --wrap 'hostname'; sacct
  account:  ${ACCOUNT}   partition: local   logs: ${STATE}/log
  stop:     ${CLUSTER_DIR}/down.sh   (keeps state; --purge deletes ${STATE})
EOF
