//! Any 64-bit value handed to the decoder, under any valid layout, epoch
//! and tick: it is refused or decoded, and a decoded ID is the one its
//! fields encode again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use snowflake_id_fuzz::arb::AnyCodec;
use snowflake_id_fuzz::snowflake::codec::Node;

fuzz_target!(|input: (AnyCodec, i64)| {
    let (AnyCodec(codec), id) = input;
    let Ok(d) = codec.decode(id) else { return };
    let _ = codec.instant_of(d.tick);
    let node = Node { datacenter: d.datacenter.unwrap_or(0), worker: d.worker.unwrap_or(0) };
    let t = codec.template(node);
    assert!(d.tick <= t.max_tick());
    assert_eq!(t.encode(t.position(d.tick) + d.sequence, d.clock_back.unwrap_or(0)), id, "{d:?}");
});
