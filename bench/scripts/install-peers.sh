#!/usr/bin/env bash
# Installs the peer systems the benchmark compares lockcell with, from the
# distribution's packages (Debian bookworm: etcd 3.4.23, ZooKeeper 3.8.0).
set -euo pipefail
if command -v etcd >/dev/null && [ -e /usr/share/java/zookeeper.jar ]; then
	exit 0
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y etcd-server zookeeper
