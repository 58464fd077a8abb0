#!/bin/sh
# Writes a new five-replica cell for statefulset.json with `lockcelld init`
# and loads it into the Secrets the pods mount:
#
#   lockcell            every replica's config (replica-N.json), the CA
#                       certificate, the sequencer-signing key and the
#                       replicas' certificates and keys, flat, as the pods
#                       see them in /etc/lockcell; never the CA's key
#   lockcell-new-cell   the new-member marker, for the cell's first start
#                       only: delete it once all five pods are ready
#
# Run it once per cell, from the source tree after `make build`:
#
#   NS=lockcell deployments/kubernetes/secrets.sh
#
# Settings (environment): NS, the namespace (default lockcell); CELL, the
# cell name (default lockcell); DIR, where init writes (default
# deploy-k8s; keep it, with certs/ca-key.pem, somewhere safe);
# LOCKCELLD, the binary (default bin/lockcelld); KUBECTL (default kubectl).
set -eu
NS=${NS:-lockcell}
CELL=${CELL:-lockcell}
DIR=${DIR:-deploy-k8s}
LOCKCELLD=${LOCKCELLD:-bin/lockcelld}
KUBECTL=${KUBECTL:-kubectl}

# Replica N is pod lockcell-(N-1), known to its peers and clients by its
# name under the headless Service.
replicas=""
for i in 0 1 2 3 4; do
	replicas="$replicas${replicas:+,}lockcell-$i.lockcell.$NS.svc.cluster.local:7001"
done
"$LOCKCELLD" init --dir "$DIR" --cell "$CELL" --replicas "$replicas" --http-host 0.0.0.0 --http-port 7101

# Every pod serves HTTP on the probes' port 7101, keeps its store on its
# volume, and finds its certificates beside its config.
args=""
for n in 1 2 3 4 5; do
	sed -e 's|"http_addr": "[^"]*"|"http_addr": "0.0.0.0:7101"|' \
		-e 's|"data_dir": "[^"]*"|"data_dir": "/var/lib/lockcell/data"|' \
		-e 's|"certs/|"|' \
		"$DIR/replica-$n.json" >"$DIR/replica-$n.json.k8s"
	mv "$DIR/replica-$n.json.k8s" "$DIR/replica-$n.json"
	args="$args --from-file=$DIR/replica-$n.json --from-file=$DIR/certs/replica-$n.pem --from-file=$DIR/certs/replica-$n-key.pem"
done
# shellcheck disable=SC2086 # args holds several words, none with spaces
"$KUBECTL" -n "$NS" create secret generic lockcell $args \
	--from-file="$DIR/certs/ca.pem" --from-file="$DIR/certs/signing-key.pem"
"$KUBECTL" -n "$NS" create secret generic lockcell-new-cell \
	--from-file="$DIR/data/replica-1/lockcell-new-member"
