#!/usr/bin/env bash
# Regenerates the kubelet gRPC code from ascend_dra/kubelet/proto:
#   ascend_dra/kubelet/_gen  betterproto2 messages + grpclib servers/stubs (the daemon's runtime code)
#   tests/kubelet_pb         Google protobuf + grpcio stubs (the C-core test client that plays the kubelet)
# Both trees are checked in; CI regenerates and fails when they differ (make proto-check).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
BIN=$(dirname "$PY")
PROTO=ascend_dra/kubelet/proto
FILES=(pluginregistration/api.proto dra/v1/api.proto dra/v1beta1/api.proto dra-health/v1alpha1/api.proto dra-health/v1/api.proto grpc/health/v1/health.proto)
rm -rf ascend_dra/kubelet/_gen tests/kubelet_pb
mkdir -p ascend_dra/kubelet/_gen tests/kubelet_pb
PATH="$BIN:$PATH" "$PY" -m grpc_tools.protoc -I "$PROTO" \
  --python_betterproto2_out=ascend_dra/kubelet/_gen \
  --python_betterproto2_opt=client_generation=async,server_generation=async \
  "${FILES[@]/#/$PROTO/}"
"$PY" -m grpc_tools.protoc -I "$PROTO" \
  --python_out=tests/kubelet_pb --grpc_python_out=tests/kubelet_pb \
  "${FILES[@]/#/$PROTO/}"
# grpc_tools writes absolute imports (`from dra.v1 import api_pb2`); make the tree a package of its own.
find tests/kubelet_pb -type d -exec touch {}/__init__.py \;
find tests/kubelet_pb -name '*_pb2_grpc.py' -print0 | xargs -0 sed -i -E 's/^from ([a-z_0-9.-]+) import (api_pb2|health_pb2)/from tests.kubelet_pb.\1 import \2/'
