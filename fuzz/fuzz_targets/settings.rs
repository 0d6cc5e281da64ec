//! Every setting as written in postgresql.conf: the layout (a preset or a
//! field list), the epoch, the tick and the node numbers, alone and together.
//! A layout the parser accepts prints as a specification that parses to it.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use snowflake_id_fuzz::arb::Spec;
use snowflake_id_fuzz::snowflake::config::{self, Config, Settings, Worker};
use snowflake_id_fuzz::snowflake::layout::Layout;
use snowflake_id_fuzz::snowflake::preset;
use snowflake_id_fuzz::snowflake::time;

#[derive(Arbitrary, Debug)]
enum Input<'a> {
    /// Any text, as a DBA may type it.
    Text { layout: &'a str, epoch: &'a str, datacenter: &'a str, worker: &'a str, tick_ms: Option<i64> },
    /// A field list of known names in any order, with any widths.
    Fields { spec: Spec, epoch: &'a str, tick_ms: Option<i64>, datacenter: i64, worker: Option<i64> },
}

fuzz_target!(|input: Input<'_>| {
    let (layout, epoch, tick_ms, datacenter, worker) = match &input {
        Input::Text { layout, epoch, datacenter, worker, tick_ms } => {
            let dc = config::parse_identity_number("snowflake_id.datacenter_id", datacenter);
            let w = config::parse_worker(worker);
            (layout.to_string(), *epoch, *tick_ms, dc.unwrap_or(0), w.unwrap_or_default())
        }
        Input::Fields { spec, epoch, tick_ms, datacenter, worker } => {
            (spec.0.clone(), *epoch, *tick_ms, *datacenter, worker.map_or(Worker::Auto, Worker::Number))
        }
    };
    if let Ok(parsed) = Layout::parse(&layout) {
        assert_eq!(Layout::parse(&parsed.to_string()), Ok(parsed), "{layout}");
        assert!(parsed.bits() <= 63);
    }
    let _ = preset::resolve(&layout);
    let _ = config::check_layout(&layout);
    let _ = time::parse_instant(epoch);
    let _ = time::parse_epoch(epoch);
    let _ = config::check_epoch(epoch);
    let settings =
        Settings { layout: &layout, epoch: Some(epoch), tick_ms, datacenter_id: datacenter, worker_id: worker };
    if let Ok(c) = Config::new(settings) {
        // auto needs a worker field to claim a number in.
        assert!(!c.auto_worker || c.codec.layout.width(snowflake_id_fuzz::snowflake::layout::Field::Worker) > 0);
        assert!(c
            .codec
            .layout
            .field(snowflake_id_fuzz::snowflake::layout::Field::Worker)
            .is_none_or(|b| c.node.worker <= b.max()));
        let _ = c.codec.node_text(c.node);
    }
    let _ = Config::new(Settings { epoch: None, ..settings });
});
