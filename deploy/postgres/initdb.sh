#!/bin/sh
# docker-entrypoint-initdb.d hook of the compose file's PostgreSQL: on the first start,
# make the owner and app roles of roles.sql in the service's database.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v owner_password="$ASR_OWNER_PASSWORD" -v app_password="$ASR_APP_PASSWORD" \
  -f /asr/roles.sql
