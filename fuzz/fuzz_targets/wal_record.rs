//! A mark record as redo reads it from WAL: any body. What redo does with a
//! record it reads (its settings, its mark, carrying it to this server's
//! settings) must not panic, and a record reads back the same once encoded.
//! The same body as a claim or a release record, too.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use snowflake_id_fuzz::arb::{self, AnyCodec};
use snowflake_id_fuzz::snowflake::claim_record::{WalClaim, WalRelease};
use snowflake_id_fuzz::snowflake::id_space;
use snowflake_id_fuzz::snowflake::wal_record::WalMark;

fuzz_target!(|input: (Vec<u8>, &[u8])| {
    let (body, rest) = input;
    if let Ok(claim) = WalClaim::decode(&body) {
        let _ = claim.to_string();
        assert_eq!(WalClaim::decode(&claim.encode()), Ok(claim));
    }
    if let Ok(release) = WalRelease::decode(&body) {
        let _ = release.to_string();
        assert_eq!(WalRelease::decode(&release.encode()), Ok(release));
    }
    let Ok(record) = WalMark::decode(&body) else { return };
    let _ = record.to_string();
    // A server encodes records of its own layout (version 2) only.
    if record.layout.is_some() {
        assert_eq!(WalMark::decode(&record.encode()), Ok(record));
    }
    // This server's settings, which the record is carried to.
    let mut u = Unstructured::new(rest);
    let Ok(AnyCodec(own)) = AnyCodec::arbitrary(&mut u) else { return };
    let Ok(node) = arb::node(&mut u, &own) else { return };
    let v1 = own.layout;
    let Some(made_under) = record.codec(Some(v1)) else { return };
    let mark = record.mark.to_mark(&made_under);
    let _ = id_space::carry(&made_under, record.node, &mark, &own, node);
});
