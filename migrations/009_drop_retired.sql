-- The statistics table's own status enum, retired before PgQueuer 0.27.
DROP TYPE IF EXISTS {{schema_prefix}}{{statistics_table_name}}_status;
