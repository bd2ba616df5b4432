#!/usr/bin/env bash
# CA bundle without cert-manager (docs/webhook.md, "Certificates"): make a CA and a serving
# certificate for the webhook Service, store them as Secret ascend-dra-webhook-tls, and write the
# CA into caBundle of both webhook configurations. Run again to rotate: the webhook reloads the
# new certificate from the updated Secret without a restart (the CA is kept if CA_DIR holds one,
# so the caBundle stays valid across rotations).
#
#   hack/webhook-certs.sh                 # namespace ascend-dra, service ascend-dra-webhook
#   NAMESPACE=x SERVICE=y CA_DIR=./pki DAYS=90 hack/webhook-certs.sh
set -euo pipefail
NAMESPACE=${NAMESPACE:-ascend-dra}
SERVICE=${SERVICE:-ascend-dra-webhook}
CONFIG=${CONFIG:-ascend-dra-webhook}
CA_DIR=${CA_DIR:-./webhook-pki}
DAYS=${DAYS:-365}
KUBECTL=${KUBECTL:-kubectl}

mkdir -p "$CA_DIR"
umask 077
if [[ ! -s "$CA_DIR/ca.crt" ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
    -keyout "$CA_DIR/ca.key" -out "$CA_DIR/ca.crt" -subj "/CN=ascend-dra-webhook-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
fi
dns="DNS:$SERVICE.$NAMESPACE.svc,DNS:$SERVICE.$NAMESPACE.svc.cluster.local"
openssl req -x509 -CA "$CA_DIR/ca.crt" -CAkey "$CA_DIR/ca.key" -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
  -nodes -days "$DAYS" -keyout "$CA_DIR/tls.key" -out "$CA_DIR/tls.crt" -subj "/CN=$SERVICE.$NAMESPACE.svc" \
  -addext "subjectAltName=$dns" -addext "basicConstraints=critical,CA:FALSE" -addext "extendedKeyUsage=serverAuth"

"$KUBECTL" -n "$NAMESPACE" create secret tls ascend-dra-webhook-tls --cert "$CA_DIR/tls.crt" --key "$CA_DIR/tls.key" \
  --dry-run=client -o yaml | "$KUBECTL" apply -f -
bundle=$(base64 -w0 <"$CA_DIR/ca.crt")
for kind in validatingwebhookconfiguration mutatingwebhookconfiguration; do
  # Every webhook of the configuration (the mutating one has two: pods and Volcano jobs).
  names=$("$KUBECTL" get "$kind" "$CONFIG" -o jsonpath='{.webhooks[*].name}')
  ops="" i=0
  for _ in $names; do
    ops="$ops${ops:+,}{\"op\": \"add\", \"path\": \"/webhooks/$i/clientConfig/caBundle\", \"value\": \"$bundle\"}"
    i=$((i + 1))
  done
  "$KUBECTL" patch "$kind" "$CONFIG" --type=json -p "[$ops]"
done
echo "serving certificate for $SERVICE.$NAMESPACE.svc stored; caBundle set on $CONFIG (CA in $CA_DIR/ca.crt)"
