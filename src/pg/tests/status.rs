//! snowflake_status() (`src/pg/status.rs`): its counters move with the IDs
//! issued, and it shows the settings in force. Who may see the state file's
//! path is pinned in `tests/pg_regress/sql/privileges.sql`.

#[pgrx::pg_schema]
mod tests {
    use crate::pg::tests::one;
    use pgrx::prelude::*;

    #[pg_test]
    fn status_counts_what_was_issued() {
        let before = one::<i64>("SELECT ids_issued FROM snowflake_status()");
        let last = one::<i64>("SELECT max(id) FROM snowflake_next_ids(1000) id");
        let (after, worker, layout) =
            Spi::get_three::<i64, i32, String>("SELECT ids_issued, worker_id, layout FROM snowflake_status()").unwrap();
        assert!(after.unwrap() >= before + 1000);
        assert_eq!(worker, Some(7));
        assert_eq!(layout.as_deref(), Some("timestamp:41,datacenter:5,worker:5,sequence:12"));
        // Nothing is issued at or after the mark: it lies at or beyond the last ID's time.
        assert!(one::<bool>(&format!(
            "SELECT high_water_mark >= snowflake_timestamp({last}) AND state_file LIKE '%snowflake_id.state'
                AND marks_written > 0 AND drift_ms >= 0 FROM snowflake_status()"
        )));
    }

    #[pg_test]
    fn status_shows_what_is_left_before_a_refusal() {
        // The default layout: no clock_back field, 12 sequence bits, 41 bits
        // of milliseconds from the epoch; the mark is known.
        assert!(one::<bool>(
            "SELECT mark_unknown IS NULL AND clock_back_left IS NULL AND ids_per_tick = 4096
                AND timestamp_range_end = epoch + (2^41 - 1) * interval '1 millisecond'
                AND snowflake_from_timestamp(timestamp_range_end) > 0
             FROM snowflake_status()"
        ));
    }
}
