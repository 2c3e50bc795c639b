-- The read-only role Grafana's PostgreSQL data source logs in as.
-- Run as the owner of the screener database, after `screener db upgrade`:
--   psql -v ON_ERROR_STOP=1 -v ro_role=screener_ro -v ro_password='...' \
--        -f deploy/sql/readonly_role.sql postgresql://OWNER@HOST/screener
-- It can read every screener table (also tables later migrations add) and nothing else:
-- every transaction is read-only and statements stop after 10 s, so a heavy dashboard
-- query cannot hold locks against the prolog hooks that write.
CREATE ROLE :"ro_role" LOGIN PASSWORD :'ro_password' NOSUPERUSER NOCREATEDB NOCREATEROLE;
GRANT CONNECT ON DATABASE :"DBNAME" TO :"ro_role";
GRANT USAGE ON SCHEMA public TO :"ro_role";
GRANT SELECT ON ALL TABLES IN SCHEMA public TO :"ro_role";
-- Tables created later by the role running this script (migrations) are readable too.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO :"ro_role";
ALTER ROLE :"ro_role" SET default_transaction_read_only = on;
ALTER ROLE :"ro_role" SET statement_timeout = '10s';
