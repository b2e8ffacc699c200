# shellcheck shell=bash
# Shared settings and helpers for launch/cluster/{up,down,env}.sh (sourced, not run).
#
# Environment overrides:
#   BRIDGEBENCH_SLURM_STATE      state directory (default: <repo>/.state/slurm; any folder, private or under /tmp)
#   BRIDGEBENCH_SLURM_RUN_DIR    the daemons' sockets (default: /run/bridgebench-<uid>/slurm-<hash of the state>)
#   BRIDGEBENCH_SLURM_PORT_BASE  first of 4 TCP ports on 127.0.0.1 (default 16817):
#                                slurmctld=base, slurmd=base+1, slurmdbd=base+2, mariadb=base+3
#   BRIDGEBENCH_SLURM_CLUSTER    cluster name (default: bridgebench)
#   BRIDGEBENCH_SLURM_ACCOUNT    account created for the current user (default: bridgebench)

# shellcheck disable=SC2034  # the settings below are used by the scripts that source this file
CLUSTER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${CLUSTER_DIR}/../.." && pwd)"
STATE="${BRIDGEBENCH_SLURM_STATE:-${REPO_ROOT}/.state/slurm}"
# Absolute path without requiring it to exist.
case "${STATE}" in /*) ;; *) STATE="$(pwd)/${STATE}" ;; esac
STATE="${STATE%/}"
# The daemons' sockets (munged's, MariaDB's) live in a runtime folder of their own, not in the state: munged refuses
# a socket unless every folder above it is executable by all (a clone in a 0700 home folder, a state made by
# `mktemp -d`), and a UNIX socket path may not exceed 107 bytes (a deep checkout). Default:
# /run/bridgebench-<uid>/slurm-<12 hex of sha256(the state's real path)> -- /run is root-owned 0755, so munged accepts
# it whatever folder the checkout is in; /tmp/bridgebench-<uid>/... where /run is not writable (munged accepts sticky
# /tmp). BRIDGEBENCH_SLURM_RUN_DIR overrides it; up.sh checks it as munged would (munge_dir_problem).
runtime_base() {
  if [[ -w /run ]]; then printf '/run/bridgebench-%s' "$(id -u)"; else printf '/tmp/bridgebench-%s' "$(id -u)"; fi
}
path_hash() { printf '%s' "$(realpath -m -- "$1")" | sha256sum | cut -c1-12; }
RUN_DIR="${BRIDGEBENCH_SLURM_RUN_DIR:-$(runtime_base)/slurm-$(path_hash "${STATE}")}"
case "${RUN_DIR}" in /*) ;; *) RUN_DIR="$(pwd)/${RUN_DIR}" ;; esac
RUN_DIR="${RUN_DIR%/}"
MUNGE_SOCKET="${RUN_DIR}/munge.socket"
MYSQL_SOCKET="${RUN_DIR}/mysqld.sock"
PORT_BASE="${BRIDGEBENCH_SLURM_PORT_BASE:-16817}"
CLUSTER="${BRIDGEBENCH_SLURM_CLUSTER:-bridgebench}"
ACCOUNT="${BRIDGEBENCH_SLURM_ACCOUNT:-bridgebench}"
CTLD_PORT="${PORT_BASE}"
SLURMD_PORT="$((PORT_BASE + 1))"
DBD_PORT="$((PORT_BASE + 2))"
MYSQL_PORT="$((PORT_BASE + 3))"
SLURM_CONF_FILE="${STATE}/etc/slurm.conf"
MARKER_FILE="${STATE}/.bridgebench-slurm-state"
ID_FILE="${STATE}/cluster-id"   # UUID of this state (up.sh), read by bridgebench (configs/cluster/local.yaml)
# Every daemon is started with this variable in its environment, so down.sh can find
# (and only find) processes belonging to this state directory even without pid files.
MARK="BRIDGEBENCH_SLURM_MARK=${STATE}"

log() { printf '[cluster %s] %s\n' "${LOG_TAG:-}" "$*"; }
die() { printf '[cluster %s] ERROR: %s\n' "${LOG_TAG:-}" "$*" >&2; exit 1; }

# take_lock: serialize up.sh/down.sh runs on one state dir (fd 9; daemons get it closed).
take_lock() {
  mkdir -p "${STATE}"
  exec 9>"${STATE}/.lock"
  if ! flock -n 9; then
    log "waiting for another up.sh/down.sh on ${STATE} to finish"
    flock -w 300 9 || die "could not lock ${STATE}/.lock"
  fi
}

# now: microseconds since the epoch (bash 5 EPOCHREALTIME, no fork); elapsed T0: seconds since T0.
now() { local t="${EPOCHREALTIME/[.,]/}"; printf '%s' "$((10#${t}))"; }
elapsed() { local d="$(( ($(now) - $1) / 100000 ))"; printf '%d.%d' "$((d / 10))" "$((d % 10))"; }

# pid_alive PID: true if PID exists and is not a zombie.
pid_alive() {
  local pid="$1" stat=""
  [[ "${pid}" =~ ^[0-9]+$ ]] || return 1
  read -r stat 2>/dev/null <"/proc/${pid}/stat" || return 1
  stat="${stat##*) }"
  [[ -n "${stat}" && "${stat:0:1}" != "Z" && "${stat:0:1}" != "X" ]]
}

# marked_pids NAME: pids of live processes named NAME carrying this state dir's MARK.
marked_pids() {
  local name="$1" d pid comm
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    comm=""
    read -r comm 2>/dev/null <"${d}/comm" || continue
    [[ "${comm}" == "${name}" ]] || continue
    if grep -qzxF "${MARK}" "${d}/environ" 2>/dev/null; then
      pid_alive "${pid}" && printf '%s\n' "${pid}"
    fi
  done
  return 0
}

# daemon_pid NAME: pid of the running daemon (pid file first, then the MARK scan).
daemon_pid() {
  local name="$1" pid
  local comm=""
  pid=""
  read -r pid 2>/dev/null <"${STATE}/run/${name}.pid" || true
  pid="${pid//[!0-9]/}"
  [[ -n "${pid}" ]] && { read -r comm 2>/dev/null <"/proc/${pid}/comm" || true; }
  if [[ -n "${pid}" && "${comm}" == "${name}" ]] && pid_alive "${pid}"; then
    printf '%s\n' "${pid}"
    return 0
  fi
  pid="$(marked_pids "${name}" | head -n1)"
  [[ -n "${pid}" ]] && printf '%s\n' "${pid}"
  return 0
}

# wait_until TIMEOUT_S DESCRIPTION CMD...: poll CMD every 0.1 s until it succeeds.
wait_until() {
  local timeout="$1" desc="$2"
  shift 2
  local deadline="$(( $(now) + timeout * 1000000 ))"
  while ! "$@" >/dev/null 2>&1; do
    if [[ "$(now)" -gt "${deadline}" ]]; then
      log "timed out after ${timeout}s waiting for ${desc}"
      return 1
    fi
    sleep 0.1
  done
}

# descendants PID...: all live descendants of the given pids (children first scan of /proc).
descendants() {
  local -A kids=()
  local d pid ppid stat
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    stat=""
    read -r stat 2>/dev/null <"${d}/stat" || continue
    stat="${stat##*) }"
    read -r _ ppid _ <<<"${stat}"
    kids["${ppid}"]+=" ${pid}"
  done
  local queue=("$@") out=() p c
  while [[ "${#queue[@]}" -gt 0 ]]; do
    p="${queue[0]}"
    queue=("${queue[@]:1}")
    for c in ${kids["${p}"]:-}; do
      out+=("${c}")
      queue+=("${c}")
    done
  done
  [[ "${#out[@]}" -gt 0 ]] && printf '%s\n' "${out[@]}"
  return 0
}

# all_dead PID...: true when none of the pids is alive.
all_dead() { local q; for q in "$@"; do pid_alive "${q}" && return 1; done; return 0; }

# stop_pids NAME TIMEOUT_S PID...: SIGTERM, wait up to TIMEOUT_S, then SIGKILL.
stop_pids() {
  local name="$1" timeout="$2"
  shift 2
  [[ "$#" -gt 0 ]] || return 0
  local t0 p left
  t0="$(now)"
  kill -TERM "$@" 2>/dev/null || true
  if ! wait_until "${timeout}" "${name} to exit" all_dead "$@"; then
    left=()
    for p in "$@"; do pid_alive "${p}" && left+=("${p}"); done
    if [[ "${#left[@]}" -gt 0 ]]; then
      log "${name}: sending SIGKILL to ${left[*]}"
      kill -KILL "${left[@]}" 2>/dev/null || true
    fi
  fi
  log "stopped ${name} (pid $*) in $(elapsed "${t0}")s"
}

# stop_daemon NAME TIMEOUT_S: stop the daemon found by pid file and/or MARK scan.
stop_daemon() {
  local name="$1" timeout="$2" pids
  pids="$( { daemon_pid "${name}"; marked_pids "${name}"; } | sort -un | tr '\n' ' ')"
  if [[ -z "${pids// /}" ]]; then
    log "${name}: not running"
  else
    # shellcheck disable=SC2086  # pids is a list of integers
    stop_pids "${name}" "${timeout}" ${pids}
  fi
  rm -f "${STATE}/run/${name}.pid"
}

# mode_of PATH / owner_of PATH: octal mode (e.g. 1777) and numeric owner, empty when PATH cannot be stat'ed.
mode_of() { stat -c '%a' -- "$1" 2>/dev/null || true; }
owner_of() { stat -c '%u' -- "$1" 2>/dev/null || true; }

# munge_dir_problem DIR: why munged (0.5.15) would refuse a socket in DIR, or nothing. Its rules, in its own words:
# "Socket is inaccessible: execute permissions for all required on <dir>" -- every folder from / down to DIR must be
# executable by all, so that any user's client can reach the socket; "Socket is insecure: invalid ownership" / "...
# writable by group/other without sticky bit" -- DIR owned by root or the user running munged, not writable by
# others unless sticky.
munge_dir_problem() {
  local dir="$1" d="$1" mode owner
  while :; do
    mode="$(mode_of "${d}")"
    [[ -n "${mode}" ]] || { printf 'cannot read %s' "${d}"; return 0; }
    if (( (8#${mode} & 8#001) == 0 )); then
      printf '%s is mode %s: munged needs every folder above its socket executable by all (o+x)' "${d}" "${mode}"
      return 0
    fi
    [[ "${d}" == / ]] && break
    d="$(dirname -- "${d}")"
  done
  mode="$(mode_of "${dir}")"; owner="$(owner_of "${dir}")"
  local up_owner; up_owner="$(owner_of "$(dirname -- "${dir}")")"
  if [[ "${owner}" != 0 && "${owner}" != "$(id -u)" ]]; then
    printf '%s belongs to uid %s: munged accepts a socket folder owned by root or by the user running it' "${dir}" "${owner}"
  elif [[ "${up_owner}" != 0 && "${up_owner}" != "$(id -u)" ]]; then
    # not munged's rule but ours: whoever owns the folder above could swap the socket folder for their own
    printf '%s belongs to uid %s: the socket folder must sit in a folder owned by root or by you' "$(dirname -- "${dir}")" "${up_owner}"
  elif (( (8#${mode} & 8#022) != 0 && (8#${mode} & 8#1000) == 0 )); then
    printf '%s is mode %s: munged refuses a socket folder others can write without the sticky bit' "${dir}" "${mode}"
  fi
  return 0
}

# sshd_path_problem FILE [USER_HOME]: why sshd's StrictModes would refuse FILE (an AuthorizedKeysFile), or nothing.
# OpenSSH (misc.c safe_path, 9.2) walks from FILE's folder up to / (or to the user's home folder) and refuses any
# folder that is not owned by root or the user, or that group or others can write -- the sticky bit of /tmp does
# not help ("Authentication refused: bad ownership or modes for directory /tmp").
sshd_path_problem() {
  local d home="${2:-}" mode owner
  d="$(dirname -- "$1")"
  while :; do
    mode="$(mode_of "${d}")"; owner="$(owner_of "${d}")"
    [[ -n "${mode}" ]] || { printf 'cannot read %s' "${d}"; return 0; }
    if [[ "${owner}" != 0 && "${owner}" != "$(id -u)" ]]; then
      printf '%s belongs to uid %s: sshd (StrictModes) refuses keys under a folder not owned by root or the user' "${d}" "${owner}"
      return 0
    fi
    if (( (8#${mode} & 8#022) != 0 )); then
      printf '%s is mode %s: sshd (StrictModes) refuses keys under a folder group or others can write, sticky or not' "${d}" "${mode}"
      return 0
    fi
    [[ "${d}" == / || "${d}" == "${home}" ]] && break
    d="$(dirname -- "${d}")"
  done
  return 0
}

# sshd_dir_problem DIR: sshd_path_problem for an authorized_keys file in DIR (the user's home folder ends the walk).
sshd_dir_problem() { sshd_path_problem "$1/authorized_keys" "$(getent passwd "$(id -un)" | cut -d: -f6)"; }

# make_run_dir DIR VAR PROBLEM_FN: create DIR (0755, its parents too) and check it with PROBLEM_FN (munge_dir_problem
# or sshd_dir_problem); die naming the reason and the fix (VAR: the variable that moves it) when it is unusable.
make_run_dir() {
  local dir="$1" var="$2" check="$3" why
  mkdir -p -- "${dir}" 2>/dev/null && chmod 755 -- "${dir}" 2>/dev/null \
    || die "cannot make the runtime folder ${dir} for the daemons' sockets and keys: set ${var} to a folder you own under a root-owned 0755 path (e.g. /run/bridgebench-$(id -u)/<name> as root)"
  why="$("${check}" "${dir}")"
  [[ -z "${why}" ]] || die "the runtime folder ${dir} cannot be used: ${why}. Fix: set ${var} to a folder whose parents are all root- or self-owned, mode 0755 (the default /run/bridgebench-$(id -u)/... is, as root), or fix the folder's mode"
}
