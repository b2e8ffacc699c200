#!/usr/bin/env bash
# Start (or repair) the emulated remote cluster: a login node (private sshd on 127.0.0.1, key authentication) in
# front of the local SLURM cluster, with a pyxis stand-in that runs job steps in a private mount namespace. See
# common.sh for what lives where and the environment overrides. Idempotent: a running sshd is kept, keys are made
# once, the login node's checkout is refreshed from this one on every run. Stop with down.sh (--purge: delete it).
# Works from a checkout in any folder (under /tmp, in a 0700 home): sshd reads its authorized_keys from a runtime
# folder StrictModes accepts (common.sh REMOTE_RUN_DIR). On a failure, the sshd this run started is stopped, and so
# is the SLURM cluster when this run started it: nothing is left running.
#
# Needs root (sshd, bubblewrap mounts) and the Debian packages of launch/cluster/install.sh (openssh-server,
# bubblewrap, rsync). Writes the login node's host key as [127.0.0.1]:<port> into the emulation's OWN known_hosts
# (<root>/ssh/known_hosts, named by configs/cluster/local_remote.yaml tunnel.known_hosts): bridgebench checks the key
# against it as ssh does for any login node; the user's ~/.ssh/known_hosts is never read or edited.
set -euo pipefail
LOG_TAG="up"
# shellcheck source=launch/remote/common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"
T0="$(now)"
umask 022

missing=()
for cmd in sshd ssh ssh-keygen bwrap rsync; do
  command -v "${cmd}" >/dev/null 2>&1 || [[ -x "/usr/sbin/${cmd}" ]] || missing+=("${cmd}")
done
[[ "${#missing[@]}" -eq 0 ]] || die "missing commands: ${missing[*]} -- run launch/cluster/install.sh (as root) first"
[[ "$(id -u)" -eq 0 ]] || die "the emulated login node runs sshd and mount namespaces: run as root"
SSHD="$(command -v sshd || echo /usr/sbin/sshd)"
VENV_PY="${BRIDGEBENCH_REMOTE_PYTHON:-${REPO_ROOT}/.venv/bin/python}"
[[ -x "${VENV_PY}" ]] || die "no project Python at ${VENV_PY} (make setup), needed as the container image's Python"

# ---------------------------------------------------------------- the SLURM cluster behind the login node
# What this run starts is stopped again if it fails later (trap): its sshd, and the SLURM cluster if it was not up.
cluster_was_up=1
for d in munged mariadbd slurmdbd slurmctld slurmd; do [[ -n "$(daemon_pid "${d}")" ]] || cluster_was_up=0; done
started_sshd="" started_cluster=""
stop_started_on_failure() {
  local rc=$?
  trap - EXIT
  if [[ "${rc}" -ne 0 ]]; then
    if [[ -n "${started_sshd}" ]]; then
      log "failed (exit ${rc}): stopping the sshd this run started, so no daemon is left running" >&2
      mapfile -t left < <(sshd_pids)
      [[ "${#left[@]}" -eq 0 ]] || stop_pids sshd 10 "${left[@]}" >&2
      rm -f "${SSHD_PID}"
    fi
    if [[ -n "${started_cluster}" ]]; then
      log "failed (exit ${rc}): stopping the SLURM cluster this run started (launch/cluster/down.sh)" >&2
      "${REPO_ROOT}/launch/cluster/down.sh" >&2 || true
    fi
  fi
  exit "${rc}"
}
trap stop_started_on_failure EXIT
# The folder sshd reads the client's public key from, checked as StrictModes will check it.
make_run_dir "${REMOTE_RUN_DIR}" BRIDGEBENCH_REMOTE_RUN_DIR sshd_dir_problem
[[ "${cluster_was_up}" == 1 ]] || started_cluster=1
cluster_out="$("${REPO_ROOT}/launch/cluster/up.sh" 2>&1)" \
  || die "the local SLURM cluster did not start (launch/cluster/up.sh): $(grep -F ERROR <<<"${cluster_out}" | tail -n 1)"
log "local SLURM cluster is up (${SLURM_CONF_FILE})"

# ---------------------------------------------------------------- the cluster's filesystem
mkdir -p "${ROOT}" "${SSH_DIR}" "${ROOT}/run" "${ROOT}/log" "${ROOT}/jobs" "${ROOT}/bin" "${ROOT}/bridgebench"
chmod 755 "${ROOT}" "${ROOT}/jobs" "${ROOT}/bin"
chmod 700 "${SSH_DIR}"
touch "${REMOTE_MARKER}"
exec 8>"${ROOT}/.lock"
flock -w 120 8 || die "another launch/remote/up.sh or down.sh holds ${ROOT}/.lock"
# The site's pyxis stand-in (bin/srun) and its container (bin/container-exec).
install -m 755 "${REMOTE_DIR}/bin/srun" "${REMOTE_DIR}/bin/container-exec" "${ROOT}/bin/"
# The container image's Python: this project's environment (mounted read-only at /opt/venv by container-exec).
mapfile -t py < <("${VENV_PY}" -c 'import os, sys; print(os.path.realpath(sys.prefix)); print(os.path.realpath(sys.base_prefix))')
printf 'IMAGE_VENV=%q\nIMAGE_PYTHON_BASE=%q\n' "${py[0]}" "${py[1]}" >"${ROOT}/image.env"
# The login node's checkout of bridgebench (mounted at /opt/bridgebench in containers): a copy of this one's code
# and configs, so nothing of the submitting checkout (plans, results, .state) exists on the "cluster".
rsync -a --delete --exclude __pycache__ --exclude '*.pyc' \
  "${REPO_ROOT}/src" "${REPO_ROOT}/configs" "${REPO_ROOT}/recipes" "${REPO_ROOT}/pyproject.toml" "${ROOT}/bridgebench/"
log "login node checkout refreshed: ${ROOT}/bridgebench (src, configs, recipes)"

# ---------------------------------------------------------------- keys (made once)
if [[ ! -s "${HOST_KEY}" ]]; then
  ssh-keygen -q -t ed25519 -N '' -C "bridgebench-remote-host" -f "${HOST_KEY}"
  log "made the login node's host key ${HOST_KEY}"
fi
if [[ ! -s "${CLIENT_KEY}" ]]; then
  ssh-keygen -q -t ed25519 -N '' -C "bridgebench-remote-client" -f "${CLIENT_KEY}"
  log "made the client key ${CLIENT_KEY}"
fi
printf 'from="127.0.0.1",no-agent-forwarding,no-X11-forwarding %s\n' "$(cat "${CLIENT_KEY}.pub")" \
  >"${AUTHORIZED_KEYS}.tmp"
chmod 600 "${AUTHORIZED_KEYS}.tmp" "${CLIENT_KEY}" "${HOST_KEY}"
mv -f "${AUTHORIZED_KEYS}.tmp" "${AUTHORIZED_KEYS}"
rm -f "${SSH_DIR}/authorized_keys"   # where an older up.sh kept it (StrictModes refused it under /tmp)

# ---------------------------------------------------------------- sshd
login_path="${ROOT}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
cat >"${SSHD_CONFIG}.tmp" <<EOF
# Generated by launch/remote/up.sh: the emulated login node. Loopback only, key authentication only.
Port ${SSH_PORT}
ListenAddress 127.0.0.1
HostKey ${HOST_KEY}
PidFile ${SSHD_PID}
AuthorizedKeysFile ${AUTHORIZED_KEYS}
AllowUsers ${LOGIN_USER}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes yes
X11Forwarding no
AllowTcpForwarding no
PrintMotd no
Subsystem sftp internal-sftp
# The login node's environment: the SLURM cluster's config and the site's pyxis (srun) first on PATH.
SetEnv PATH=${login_path} SLURM_CONF=${SLURM_CONF_FILE} BRIDGEBENCH_REMOTE_ROOT=${ROOT}
EOF
if [[ -f "${SSHD_CONFIG}" ]] && cmp -s "${SSHD_CONFIG}.tmp" "${SSHD_CONFIG}"; then
  rm -f "${SSHD_CONFIG}.tmp"; changed=0
else
  mv -f "${SSHD_CONFIG}.tmp" "${SSHD_CONFIG}"; changed=1
fi
mkdir -p /run/sshd && chmod 755 /run/sshd   # sshd's privilege separation directory
"${SSHD}" -t -f "${SSHD_CONFIG}" || die "sshd rejects ${SSHD_CONFIG}"
sshd_pid() { sshd_pids | head -n1; }
pid="$(sshd_pid)"
if [[ -n "${pid}" && "${changed}" == 1 ]]; then
  log "sshd_config changed: restarting sshd (pid ${pid})"
  stop_pids sshd 10 "${pid}"
  pid=""
fi
if [[ -n "${pid}" ]]; then
  log "sshd already running (pid ${pid}) on 127.0.0.1:${SSH_PORT}"
else
  if ss -Hltn "sport = :${SSH_PORT}" 2>/dev/null | grep -q .; then
    die "port ${SSH_PORT} is already in use; set BRIDGEBENCH_REMOTE_SSH_PORT (or BRIDGEBENCH_SLURM_PORT_BASE)"
  fi
  rm -f "${SSHD_PID}"
  t="$(now)"
  started_sshd=1
  env -i PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" LANG=C.UTF-8 \
    "${SSHD}" -f "${SSHD_CONFIG}" -E "${ROOT}/log/sshd.log" 8>&- || die "sshd failed to start; see ${ROOT}/log/sshd.log"
  sshd_up() { [[ -n "$(sshd_pid)" ]] && ss -Hltn "sport = :${SSH_PORT}" | grep -q .; }
  wait_until 10 "sshd on 127.0.0.1:${SSH_PORT}" sshd_up || die "sshd not listening; see ${ROOT}/log/sshd.log"
  log "started sshd (pid $(sshd_pid)) on 127.0.0.1:${SSH_PORT} in $(elapsed "${t}")s"
fi

# ---------------------------------------------------------------- known_hosts (the emulation's own, never ~/.ssh's)
host_line="${KNOWN_HOSTS_ENTRY} $(cut -d' ' -f1,2 "${HOST_KEY}.pub")"
if ! grep -qxF "${host_line}" "${KNOWN_HOSTS}" 2>/dev/null; then
  printf '%s\n' "${host_line}" >"${KNOWN_HOSTS}.tmp"
  chmod 600 "${KNOWN_HOSTS}.tmp"
  mv -f "${KNOWN_HOSTS}.tmp" "${KNOWN_HOSTS}"
  log "wrote ${KNOWN_HOSTS_ENTRY}'s host key into ${KNOWN_HOSTS}"
fi

# ---------------------------------------------------------------- check: log in with the key, ask SLURM
t="$(now)"
out="$(ssh -i "${CLIENT_KEY}" -p "${SSH_PORT}" -o BatchMode=yes -o ConnectTimeout=5 -o IdentitiesOnly=yes \
  -o StrictHostKeyChecking=yes -o UserKnownHostsFile="${KNOWN_HOSTS}" -o GlobalKnownHostsFile=/dev/null \
  "${LOGIN_USER}@127.0.0.1" 'command -v srun; sinfo -h -o %P' 2>&1)" \
  || die "cannot log in to the emulated login node: ${out}; sshd says: $(grep -E 'refused|[Bb]ad ownership|Could not|Invalid user|not allowed|[Ee]rror' "${ROOT}/log/sshd.log" 2>/dev/null | tail -n 2 | tr '\n' ' ')(log: ${ROOT}/log/sshd.log)"
[[ "${out}" == "${ROOT}/bin/srun"* ]] || die "the login node's srun is not the pyxis stand-in: ${out}"
log "ssh ${LOGIN_USER}@127.0.0.1:${SSH_PORT} works (srun: ${ROOT}/bin/srun; partitions: ${out##*$'\n'}) in $(elapsed "${t}")s"

cat <<EOF
[remote up] emulated remote cluster is up in $(elapsed "${T0}")s
  login node: ssh -i ${CLIENT_KEY} -p ${SSH_PORT} -o UserKnownHostsFile=${KNOWN_HOSTS} ${LOGIN_USER}@127.0.0.1
  cluster filesystem: ${ROOT} (jobs/: the tunnel's job_dir; bridgebench/: its checkout, mounted at /opt/bridgebench)
  use it:   eval "\$(${REMOTE_DIR}/env.sh)"   # if you changed BRIDGEBENCH_REMOTE_* or the SLURM port base
  try:      bridgebench submit experiment=optstep_local cluster=local_remote --wait && bridgebench collect
  stop:     ${REMOTE_DIR}/down.sh   (make cluster-down stops it too; --purge deletes ${ROOT})
EOF
