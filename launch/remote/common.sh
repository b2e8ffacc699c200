# shellcheck shell=bash
# Shared settings of the emulated remote cluster (launch/remote/{up,down,env}.sh; sourced, not run).
#
# The emulation puts a login node in front of the local SLURM cluster (launch/cluster/): a private sshd on
# 127.0.0.1 (Debian openssh-server, key authentication only, keys made by up.sh), reached from bridgebench through
# nemo-run's SSHTunnel; its "cluster filesystem" is ${ROOT}: the tunnel's job folders (jobs/), the login node's
# checkout of bridgebench (bridgebench/, mounted into containers at /opt/bridgebench), and the site's pyxis stand-in
# (bin/srun, bin/container-exec: job steps with --container-image run in a private mount namespace made by
# bubblewrap that holds only the image, the declared --container-mounts and nemo-run's job-folder mount).
#
# Environment overrides:
#   BRIDGEBENCH_REMOTE_ROOT      the emulated cluster's filesystem (default: <repo>/.state/remote)
#   BRIDGEBENCH_REMOTE_SSH_PORT  sshd port on 127.0.0.1 (default: BRIDGEBENCH_SLURM_PORT_BASE + 5, i.e. 16822)
#   BRIDGEBENCH_REMOTE_USER      login user (default: the user running up.sh)
#   BRIDGEBENCH_REMOTE_RUN_DIR   the login node's authorized_keys (default: /run/bridgebench-<uid>/remote-<hash>)
#   plus launch/cluster/common.sh's (BRIDGEBENCH_SLURM_STATE, BRIDGEBENCH_SLURM_PORT_BASE ...) for the SLURM side.

# shellcheck source=launch/cluster/common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../cluster" && pwd)/common.sh"
log() { printf '[remote %s] %s\n' "${LOG_TAG:-}" "$*"; }
die() { printf '[remote %s] ERROR: %s\n' "${LOG_TAG:-}" "$*" >&2; exit 1; }
# shellcheck disable=SC2034  # used by the scripts that source this file
REMOTE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="${BRIDGEBENCH_REMOTE_ROOT:-${REPO_ROOT}/.state/remote}"
case "${ROOT}" in /*) ;; *) ROOT="$(pwd)/${ROOT}" ;; esac
ROOT="${ROOT%/}"
SSH_PORT="${BRIDGEBENCH_REMOTE_SSH_PORT:-$((PORT_BASE + 5))}"
LOGIN_USER="${BRIDGEBENCH_REMOTE_USER:-$(id -un)}"
SSH_DIR="${ROOT}/ssh"
SSHD_CONFIG="${SSH_DIR}/sshd_config"
SSHD_PID="${ROOT}/run/sshd.pid"
CLIENT_KEY="${SSH_DIR}/id_ed25519"
HOST_KEY="${SSH_DIR}/ssh_host_ed25519_key"
KNOWN_HOSTS_ENTRY="[127.0.0.1]:${SSH_PORT}"
# The login node's host key, as the client side knows it: the emulation's own known_hosts (configs/cluster/
# local_remote.yaml tunnel.known_hosts), never the user's ~/.ssh/known_hosts.
KNOWN_HOSTS="${SSH_DIR}/known_hosts"
REMOTE_MARKER="${ROOT}/.bridgebench-remote"
# sshd's StrictModes refuses an authorized_keys file under any folder group or others can write (the sticky /tmp
# included) or that someone else owns: the key sshd reads lives in a runtime folder of its own, root-owned all the
# way up whatever the folder of the checkout -- /run/bridgebench-<uid>/remote-<12 hex of sha256(the root's real
# path)>; BRIDGEBENCH_REMOTE_RUN_DIR overrides it (checked as sshd would: sshd_path_problem).
REMOTE_RUN_DIR="${BRIDGEBENCH_REMOTE_RUN_DIR:-$(runtime_base)/remote-$(path_hash "${ROOT}")}"
case "${REMOTE_RUN_DIR}" in /*) ;; *) REMOTE_RUN_DIR="$(pwd)/${REMOTE_RUN_DIR}" ;; esac
REMOTE_RUN_DIR="${REMOTE_RUN_DIR%/}"
AUTHORIZED_KEYS="${REMOTE_RUN_DIR}/authorized_keys"

# sshd_pids: pids of this emulation's sshd listener (its command line names our sshd_config; sshd rewrites its
# process title and environment, so the title is what identifies it).
sshd_pids() {
  local d comm cmd
  for d in /proc/[0-9]*; do
    comm=""
    read -r comm 2>/dev/null <"${d}/comm" || continue
    [[ "${comm}" == sshd ]] || continue
    cmd="$(tr '\0' ' ' <"${d}/cmdline" 2>/dev/null || true)"
    [[ "${cmd}" == *"-f ${SSHD_CONFIG} "* && "${cmd}" == *"[listener]"* ]] && pid_alive "${d#/proc/}" && printf '%s\n' "${d#/proc/}"
  done
  return 0
}
