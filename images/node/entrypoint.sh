#!/bin/sh
# Emulated lab node: the node's own dockerd (background, log in /var/log/dockerd.log), then sshd.
set -eu
mkdir -p /run/sshd
ssh-keygen -A >/dev/null
if [ -f /root/.ssh/authorized_keys.mounted ]; then
    install -m 0600 /root/.ssh/authorized_keys.mounted /root/.ssh/authorized_keys
fi
dockerd --storage-driver="${DOCKERD_STORAGE_DRIVER}" --host=unix:///var/run/docker.sock \
    --cgroup-parent="/fltest-node-$(hostname)" \
    >/var/log/dockerd.log 2>&1 &
exec /usr/sbin/sshd -D -e
