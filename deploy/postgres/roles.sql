-- The two database roles of a PostgreSQL deployment. Run it once, as a superuser, connected
-- to the service's database (already created):
--
--   psql -d asr -v owner_role=asr_owner -v app_role=asr_app \
--        -v owner_password=… -v app_password=… -f deploy/postgres/roles.sql
--
-- owner_role owns the database, the tables and the functions: `asr migrate` connects as it.
-- app_role is what `asr serve` connects as: it may read and write rows and execute the
-- functions, but owns nothing, is no superuser, cannot bypass row-level security and is no
-- member of owner_role (so it cannot SET ROLE to it), so the tenant policies bind every
-- query it makes: since migration 0009 they admit only the one tenant a transaction names,
-- whatever it sets. The only work that spans tenants is the owner's few SECURITY DEFINER
-- functions (README, Security), which the app role may call. Keep the owner's password out
-- of the service's environment. Both names default to the above; a password left unset
-- leaves the role without one (peer/trust or certificate authentication).
\set ON_ERROR_STOP on
\if :{?owner_role}
\else
  \set owner_role asr_owner
\endif
\if :{?app_role}
\else
  \set app_role asr_app
\endif
SELECT current_database() AS db \gset

CREATE ROLE :"owner_role" LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
CREATE ROLE :"app_role" LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOINHERIT;
\if :{?owner_password}
  ALTER ROLE :"owner_role" PASSWORD :'owner_password';
\endif
\if :{?app_password}
  ALTER ROLE :"app_role" PASSWORD :'app_password';
\endif

-- The owner holds the database and its public schema; nobody else may create objects in it.
ALTER DATABASE :"db" OWNER TO :"owner_role";
ALTER SCHEMA public OWNER TO :"owner_role";
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE :"db" TO :"owner_role", :"app_role";
GRANT USAGE ON SCHEMA public TO :"app_role";

-- Row access on the tables there are now, and on those later migrations create.
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO :"app_role";
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO :"app_role";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner_role" IN SCHEMA public
  GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO :"app_role";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner_role" IN SCHEMA public
  GRANT USAGE, SELECT ON SEQUENCES TO :"app_role";

-- Functions the migrations create (0005's asr_append_events) run with the caller's rights
-- (SECURITY INVOKER), so the policies still bind the app role inside them; the cross-tenant
-- ones of 0009 run as the owner and are not executable by PUBLIC (the migration revokes
-- that), so this grant, through the default privileges below, is what lets the app role
-- call them. PUBLIC may execute the others by default; the grant says so explicitly, and
-- keeps working where an operator has revoked that default.
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO :"app_role";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner_role" IN SCHEMA public
  GRANT EXECUTE ON FUNCTIONS TO :"app_role";
