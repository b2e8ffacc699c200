# Local single-node SLURM cluster (munge + private MariaDB + slurmdbd + slurmctld + slurmd),
# state under .state/slurm (override with BRIDGEBENCH_SLURM_STATE). See launch/cluster/.
# Included from the main Makefile:  include mk/cluster.mk
CLUSTER_DIR ?= launch/cluster
VENV ?= .venv

REMOTE_DIR ?= launch/remote

.PHONY: cluster-install cluster-up cluster-down cluster-purge cluster-status cluster-test cluster-help remote-up remote-down

cluster-help:
	@echo "make cluster-install  install slurm/munge/mariadb Debian packages (root; skipped otherwise)"
	@echo "make cluster-up       start (or repair) the local SLURM cluster; then: eval \"\$$($(CLUSTER_DIR)/env.sh)\""
	@echo "make cluster-down     stop it, keeping state (cluster-purge: stop and delete state)"
	@echo "make cluster-status   daemons, sinfo, squeue, recent sacct"
	@echo "make cluster-test     pytest -m slurm tests/test_local_cluster.py"
	@echo "make remote-up        the cluster behind an emulated login node (sshd on 127.0.0.1, containers): cluster=local_remote"
	@echo "make remote-down      stop the emulated login node (cluster-down stops both)"

cluster-install:
	$(CLUSTER_DIR)/install.sh

cluster-up:
	$(CLUSTER_DIR)/up.sh

cluster-down:
	$(REMOTE_DIR)/down.sh
	$(CLUSTER_DIR)/down.sh

cluster-purge:
	$(REMOTE_DIR)/down.sh --purge
	$(CLUSTER_DIR)/down.sh --purge

# The remote path on one machine (launch/remote/): the local SLURM cluster behind a login node (sshd, key auth) with
# a pyxis stand-in that runs job steps in a private mount namespace (bubblewrap). Use with cluster=local_remote.
remote-up:
	$(REMOTE_DIR)/up.sh

remote-down:
	$(REMOTE_DIR)/down.sh

cluster-status:
	$(CLUSTER_DIR)/status.sh

cluster-test:
	$(VENV)/bin/pytest -q -m slurm tests/test_local_cluster.py
