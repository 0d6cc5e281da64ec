//! The blocks a registered sequence with an increment hands a pooled
//! allocator: any increment and convention, under any layout and node. A
//! block that fits is a run of consecutive IDs of one tick, all of this
//! node, and the value returned lies in it.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use snowflake_id_fuzz::arb::{self, AnyCodec};
use snowflake_id_fuzz::snowflake::block::{BlockPlan, Convention};

fuzz_target!(|bytes: &[u8]| {
    let mut u = Unstructured::new(bytes);
    let Ok(AnyCodec(codec)) = AnyCodec::arbitrary(&mut u) else { return };
    let Ok(node) = arb::node(&mut u, &codec) else { return };
    let (Ok(increment), Ok(convention)) =
        (i64::arbitrary(&mut u), u.choose(&[Convention::High, Convention::Low, Convention::Either]))
    else {
        return;
    };
    let t = codec.template(node);
    let Ok(plan) = BlockPlan::new(increment, *convention, &t) else { return };
    let run = plan.run();
    assert!(run >= 1 && run <= t.consecutive_in_tick(), "{plan:?}");
    let (Ok(tick), Ok(clock_back)) =
        (u.int_in_range(0..=t.max_tick()), u.int_in_range(0..=t.max_clock_back().unwrap_or(0)))
    else {
        return;
    };
    let Ok(start) = u.int_in_range(0..=t.consecutive_in_tick() - run) else { return };
    let first = t.encode(t.position(tick) + start, clock_back);
    let last = t.encode(t.position(tick) + start + run - 1, clock_back);
    assert_eq!(last - first, run as i64 - 1, "consecutive values");
    let value = plan.value(first);
    assert!(first <= value && value <= last);
    for id in [first, value, last] {
        let d = codec.decode(id).expect("an ID of the block decodes");
        assert_eq!((d.tick, d.datacenter.unwrap_or(0), d.worker.unwrap_or(0)), (tick, node.datacenter, node.worker));
    }
});
