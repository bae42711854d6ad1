#!/usr/bin/env bash
# PostgreSQL for the store tests, from Debian's packages, on 127.0.0.1
# only, with TLS by a CA of its own (`loop-tests-tls/ca.pem` beside the
# cluster's configuration): starts the packaged cluster (making one if the
# package made none),
# gives it a `loop` role that may create databases (each test makes its
# own), and prints the URL the tests use. Redis is not started here: each
# queue test starts (and restarts) redis-server processes of its own.
# Needs root (it runs the cluster as the `postgres` user).
set -euo pipefail

version=$(ls /usr/lib/postgresql | sort -V | tail -1)
if [ -z "$version" ]; then
  echo "services.sh: PostgreSQL is not installed (apt-get install postgresql)" >&2
  exit 1
fi
if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$version main"; then
  pg_createcluster "$version" main >&2
fi
# Loopback only (a file of our own in conf.d, which the packaged
# postgresql.conf includes).
conf=/etc/postgresql/$version/main
pg_conftool "$version" main remove listen_addresses >&2 || true
mkdir -p "$conf/conf.d"
# TLS with a CA of the tests' own (the store's TLS test trusts it, and
# must refuse a second one it makes): the server's certificate names
# 127.0.0.1 and localhost. Plain connections are still accepted.
tls=$conf/loop-tests-tls
if [ ! -s "$tls/server.pem" ] || ! openssl x509 -checkend 86400 -noout -in "$tls/server.pem" >/dev/null 2>&1; then
  rm -rf "$tls"
  mkdir -p "$tls"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tls/ca.key" -out "$tls/ca.pem" \
    -days 30 -subj "/CN=loop tests CA" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$tls/server.key" -out "$tls/server.csr" \
    -subj "/CN=127.0.0.1" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$tls/ext"
  openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" \
    -CAcreateserial -out "$tls/server.pem" -days 30 -extfile "$tls/ext" 2>/dev/null
  chown -R postgres:postgres "$tls"
  chmod 600 "$tls/server.key" "$tls/ca.key"
  chmod 644 "$tls/ca.pem" "$tls/server.pem"
fi
cat >"$conf/conf.d/loop-tests.conf" <<CONF
listen_addresses = '127.0.0.1'
ssl = on
ssl_cert_file = '$tls/server.pem'
ssl_key_file = '$tls/server.key'
CONF
port=$(pg_conftool -s "$version" main show port)
if ! pg_lsclusters -h | awk -v v="$version" '$1==v && $2=="main" {print $4}' | grep -qx online; then
  pg_ctlcluster "$version" main start >&2
else
  pg_ctlcluster "$version" main reload >&2
fi
for _ in $(seq 1 50); do
  pg_isready -q -h 127.0.0.1 -p "$port" && break
  sleep 0.2
done
psql_admin() { runuser -u postgres -- psql -q -p "$port" -v ON_ERROR_STOP=1 "$@"; }
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'loop'")" != 1 ]; then
  psql_admin -c "CREATE ROLE loop LOGIN CREATEDB PASSWORD 'loop-tests-only'" >&2
fi
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = 'loop'")" != 1 ]; then
  psql_admin -c "CREATE DATABASE loop OWNER loop" >&2
fi
echo "postgres://loop:loop-tests-only@127.0.0.1:$port/loop"
