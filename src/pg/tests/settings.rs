//! The settings as a session sees them (`src/pg/settings.rs`), and the labels
//! (volatility, parallel safety, strictness, row estimates) of the SQL
//! functions. That an identity setting cannot be changed in a session, and the
//! refusals of ALTER SYSTEM, are pinned in `tests/pg_regress/sql/errors.sql`;
//! settings that must stop the server, in `tests/startup.rs`.

#[pgrx::pg_schema]
mod tests {
    use crate::pg::tests::one;
    use pgrx::prelude::*;

    #[pg_test]
    fn settings_are_visible_and_cannot_be_set_in_a_session() {
        assert_eq!(one::<String>("SHOW snowflake_id.worker_id"), "7");
        assert_eq!(one::<String>("SHOW snowflake_id.datacenter_id"), "3");
        assert_eq!(one::<String>("SHOW snowflake_id.layout"), "timestamp:41,datacenter:5,worker:5,sequence:12");
        assert_eq!(one::<String>("SHOW snowflake_id.epoch"), "2025-01-01 00:00:00+00");
        assert_eq!(one::<String>("SHOW snowflake_id.tick_ms"), "1");
        assert_eq!(one::<String>("SHOW snowflake_id.max_clock_drift"), "1d");
        assert_eq!(one::<String>("SHOW snowflake_id.max_wait"), "10s");
        assert_eq!(one::<String>("SHOW snowflake_id.guard_action"), "error");
        assert_eq!(one::<String>("SHOW snowflake_id.worker_reuse_after"), "7d");
        // The contexts below say which settings a session cannot set; errors.sql
        // shows each SET refused and the setting unchanged.
        let contexts = one::<String>(
            "SELECT string_agg(name || '=' || context, ' ' ORDER BY name) FROM pg_settings WHERE name LIKE 'snowflake_id.%'",
        );
        assert_eq!(
            contexts,
            "snowflake_id.datacenter_id=postmaster snowflake_id.epoch=postmaster snowflake_id.guard_action=sighup \
             snowflake_id.layout=postmaster snowflake_id.max_clock_drift=sighup snowflake_id.max_wait=sighup snowflake_id.tick_ms=postmaster \
             snowflake_id.wal_rmgr_id=postmaster snowflake_id.worker_id=postmaster snowflake_id.worker_reuse_after=sighup"
        );
    }

    #[pg_test]
    fn functions_carry_the_right_labels() {
        let labels = one::<String>(
            "SELECT string_agg(format('%s(%s):%s%s%s', proname, pronargs, provolatile, proparallel,
                                      CASE WHEN proisstrict THEN 'S' ELSE '' END), ' ' ORDER BY proname, pronargs)
             FROM pg_proc WHERE proname LIKE 'snowflake\\_%' AND pronamespace = 'public'::regnamespace
               -- sequence mode's: docs/functions.md's table, by tests/function_catalog.rs
               AND proname NOT LIKE 'snowflake\\_sequence\\_%'",
        );
        assert_eq!(
            labels,
            "snowflake_adopt(3):vu snowflake_decode(1):ssS snowflake_decode(4):is snowflake_decode(4):is \
             snowflake_from_interval(1):ssS snowflake_from_timestamp(1):ssS snowflake_guard(2):vu \
             snowflake_guard_check(0):vu snowflake_next_id(0):vsS snowflake_next_ids(1):vsS snowflake_now(0):ssS \
             snowflake_raise_floor(1):vuS \
             snowflake_release_worker(2):vu snowflake_status(0):vsS snowflake_timestamp(1):ssS \
             snowflake_worker_claims(0):ssS"
        );
        let one_row = one::<bool>(
            "SELECT bool_and(prorows = 1) FROM pg_proc WHERE proname IN ('snowflake_decode', 'snowflake_status')",
        );
        assert!(one_row, "single-row functions tell the planner so");
    }
}
