#!/usr/bin/env bash
# The lifecycle of an aggregated-layout sandbox, step by step, with each step's latency:
# create -> snapshot -> fork 2 -> pause -> resume -> delete.
#
#   eval "$(npx sbx up --detach --layout aggregated)"   # kubectl and kubectl-sandbox on PATH
#   bash examples/lifecycle/walkthrough.sh [namespace] [template]
set -euo pipefail
ns=${1:-default}
template=${2:-sandbox/base}
name=walk-$RANDOM
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
step() {
  local what=$1
  shift
  local t0
  t0=$(date +%s%N)
  "$@" >/tmp/walkthrough.$$ 2>&1 || { cat /tmp/walkthrough.$$ >&2; rm -f /tmp/walkthrough.$$; exit 1; }
  printf '%-34s %6s ms   %s\n' "$what" "$(ms "$t0")" "$(tr '\n' ' ' </tmp/walkthrough.$$ | cut -c1-90)"
  rm -f /tmp/walkthrough.$$
}

step "create sandbox $name" kubectl create -n "$ns" -f - <<YAML
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata:
  name: $name
spec:
  podTemplate:
    spec:
      containers:
        - name: main
          image: $template
YAML
step "write a file in it" kubectl sandbox -n "$ns" exec "$name" -- sh -c 'echo hello-from-parent > /tmp/greeting; cat /tmp/greeting'
snapshot=$(kubectl sandbox -n "$ns" snapshot "$name" --label walkthrough)
step "snapshot (again, timed)" kubectl sandbox -n "$ns" snapshot "$name"
step "fork 2" kubectl sandbox -n "$ns" fork "$name" --count 2
step "pause" kubectl sandbox -n "$ns" pause "$name"
step "resume" kubectl sandbox -n "$ns" resume "$name"
step "read the file after resume" kubectl sandbox -n "$ns" exec "$name" -- cat /tmp/greeting
step "create from snapshot $snapshot" kubectl create -n "$ns" -f - <<YAML
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata:
  name: $name-restored
  annotations:
    sandbox.cocoonstack.io/snapshot: $snapshot
spec:
  podTemplate:
    spec:
      containers:
        - name: main
          image: $template
YAML
step "read the file in the restored one" kubectl sandbox -n "$ns" exec "$name-restored" -- cat /tmp/greeting
step "list" kubectl get sandboxes -n "$ns" -l "sandbox.cocoonstack.io/forked-from=$name" -o name
for s in $(kubectl get sandboxes -n "$ns" -l "sandbox.cocoonstack.io/forked-from=$name" -o name); do
  kubectl delete -n "$ns" "$s" --wait=false >/dev/null
done
step "delete" kubectl delete -n "$ns" sandbox "$name" "$name-restored"
