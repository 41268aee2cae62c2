#!/bin/sh
# Emulated lab node: the settings of the dockerd the playbook will install, then sshd.
set -eu
mkdir -p /run/sshd /etc/docker
ssh-keygen -A >/dev/null
if [ -f /root/.ssh/authorized_keys.mounted ]; then
    install -m 0600 /root/.ssh/authorized_keys.mounted /root/.ssh/authorized_keys
fi
# The nested containers' cgroups go under /fltest-node-<hostname> (the test removes it afterwards).
printf '{"storage-driver": "%s", "cgroup-parent": "/fltest-node-%s"}\n' "${DOCKERD_STORAGE_DRIVER}" "$(hostname)" \
    > /etc/docker/daemon.json
exec /usr/sbin/sshd -D -e
