#!/usr/bin/env bash
# PostgreSQL for tests/experiments/test_scale_out.py: several workers on one Optuna study
# need a server database (SQLite is one writer at a time). Debian's postgresql, a running
# cluster, role flashtune (password flashtune) and database flashtune_test on 127.0.0.1.
# Idempotent: an installed package, a running cluster, the role and the database are kept.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi

# The cluster Debian made on install (pg_createcluster), started whatever the init system.
version=$(ls /usr/lib/postgresql | sort -V | tail -1)
if ! pg_lsclusters -h | awk -v v="$version" '$1 == v' | grep -q .; then
  $SUDO pg_createcluster "$version" main >/dev/null
fi
cluster=$(pg_lsclusters -h | awk -v v="$version" '$1 == v {print $2; exit}')
if ! pg_lsclusters -h | awk -v v="$version" -v c="$cluster" '$1 == v && $2 == c {print $4}' | grep -q online; then
  $SUDO pg_ctlcluster "$version" "$cluster" start
fi

psql_admin() { $SUDO -u postgres psql -v ON_ERROR_STOP=1 -qAt "$@"; }
# Containers run as root without sudo: su to postgres instead.
if [ -z "$SUDO" ]; then psql_admin() { su postgres -c "psql -v ON_ERROR_STOP=1 -qAt $(printf '%q ' "$@")"; }; fi

if [ "$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = 'flashtune'")" != 1 ]; then
  psql_admin -c "CREATE ROLE flashtune LOGIN PASSWORD 'flashtune'"
fi
# CREATEDB: each test makes throw-away databases (Optuna and MLflow both keep an
# alembic_version table, so they cannot share one).
psql_admin -c "ALTER ROLE flashtune CREATEDB"
if [ "$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = 'flashtune_test'")" != 1 ]; then
  psql_admin -c "CREATE DATABASE flashtune_test OWNER flashtune"
fi
# Each worker holds pools of connections (Optuna's storage, MLflow's store, heartbeats), and
# the scale-out tests run several studies' workers back to back: 100 slots (the default) ran
# out once in CI ("remaining connection slots are reserved"). 300 leaves room.
if [ "$(psql_admin -c "SHOW max_connections")" -lt 300 ]; then
  psql_admin -c "ALTER SYSTEM SET max_connections = 300"
  $SUDO pg_ctlcluster "$version" "$cluster" restart
fi
echo "setup-postgres: cluster $version/$cluster online; postgresql://flashtune:flashtune@127.0.0.1:5432/flashtune_test"
