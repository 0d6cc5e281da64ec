//! snowflake_next_id() and snowflake_next_ids() (`src/pg/next_id.rs`,
//! `src/pg/generate.rs`): IDs increase and never repeat, within a call, a
//! statement and a table default.
//! Their errors (bulk sizes) are pinned in `tests/pg_regress/sql/errors.sql`;
//! several backends generating at once, in `tests/bulk.rs`.

#[pgrx::pg_schema]
mod tests {
    use crate::pg::tests::one;
    use pgrx::prelude::*;

    #[pg_test]
    fn next_id_is_positive_and_increasing() {
        let a = one::<i64>("SELECT snowflake_next_id()");
        let b = one::<i64>("SELECT snowflake_next_id()");
        assert!(a > 0 && b > a, "{a} then {b}");
    }

    #[pg_test]
    fn a_hundred_thousand_ids_from_one_call_are_unique_and_increasing() {
        let (n, distinct, increasing) = Spi::get_three::<i64, i64, bool>(
            "SELECT count(*), count(DISTINCT id), bool_and(id > prev)
             FROM (SELECT id, lag(id, 1, 0::bigint) OVER (ORDER BY ord) AS prev
                   FROM snowflake_next_ids(100000) WITH ORDINALITY AS s(id, ord)) s",
        )
        .unwrap();
        assert_eq!((n, distinct, increasing), (Some(100_000), Some(100_000), Some(true)));
    }

    #[pg_test]
    fn single_calls_in_one_statement_are_unique() {
        let (n, distinct) = Spi::get_two::<i64, i64>(
            "SELECT count(*), count(DISTINCT id) FROM (SELECT snowflake_next_id() AS id FROM generate_series(1, 100000)) s",
        )
        .unwrap();
        assert_eq!(n, distinct);
    }

    /// The refusals of -1 and 100000001 IDs are pinned in errors.sql.
    #[pg_test]
    fn next_ids_edge_counts() {
        assert_eq!(one::<i64>("SELECT count(*) FROM snowflake_next_ids(0)"), 0);
        assert_eq!(one::<i64>("SELECT count(*) FROM snowflake_next_ids(NULL)"), 0);
        assert_eq!(one::<i64>("SELECT count(*) FROM snowflake_next_ids(1)"), 1);
    }

    #[pg_test]
    fn a_table_default_fills_increasing_keys_of_this_worker() {
        Spi::run(
            "CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), n int);
             INSERT INTO orders (n) SELECT g FROM generate_series(1, 5000) g",
        )
        .unwrap();
        let (count, in_order, workers) = Spi::get_three::<i64, bool, i64>(
            "SELECT count(*), bool_and(id > prev), count(DISTINCT (d).worker_id)
             FROM (SELECT id, lag(id, 1, 0::bigint) OVER (ORDER BY n) AS prev, snowflake_decode(id) AS d FROM orders) s",
        )
        .unwrap();
        assert_eq!((count, in_order, workers), (Some(5000), Some(true), Some(1)));
    }

    /// The quick path's reading, taken before the lock, is safe only if a
    /// step back counted under the lock is published when the lock is
    /// released (`Generator::reserve_one_early` has the rule and its tests).
    #[pg_test]
    fn a_step_back_counted_under_the_lock_is_published_when_it_is_released() {
        use crate::pg::{clock, settings, shmem};
        one::<i64>("SELECT snowflake_next_id()");
        let before = shmem::step_backs_published().unwrap();
        {
            let mut state = shmem::lock();
            assert_eq!(state.generator.stats().clock_step_backs, before);
            let time = settings::config().codec.time;
            // An hour below the last reading (however long this backend
            // was paused since), within the drift bound of a day.
            let back = time.tick_of(clock::now()) - time.ticks_in(3_600_000) as i64;
            if let Ok(grant) = state.generator.reserve(back, 1, time.ticks_in(settings::max_drift_ms())) {
                if grant.renew.is_some() {
                    state.generator.mark_failed(); // not written here: asked for again later
                }
            }
            assert_eq!(state.generator.stats().clock_step_backs, before + 1);
            assert_eq!(shmem::step_backs_published(), Some(before), "not while the lock is held");
        }
        assert_eq!(shmem::step_backs_published(), Some(before + 1));
        // The next call reports the step back; the one after is quick again.
        let a = one::<i64>("SELECT snowflake_next_id()");
        let b = one::<i64>("SELECT snowflake_next_id()");
        assert!(b > a, "{a} then {b}");
        assert_eq!(shmem::step_backs_published(), Some(before + 1));
    }
}
