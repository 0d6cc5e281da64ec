//! The state file as the server reads it at start: any bytes, and files of
//! the format's own lines with any values and a checksum that matches, so
//! that the fuzzer gets past the checksum. What a server does with a file it
//! accepts (its settings, its mark, a generator resumed from it) must not
//! panic either, and a file it accepts reads back the same once rendered.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use snowflake_id_fuzz::snowflake::claims::Instance;
use snowflake_id_fuzz::snowflake::codec::{Codec, Node};
use snowflake_id_fuzz::snowflake::generator::{Generator, Window};
use snowflake_id_fuzz::snowflake::layout::Field;
use snowflake_id_fuzz::snowflake::preset;
use snowflake_id_fuzz::snowflake::state_file::{parse, seal, StateFile};
use snowflake_id_fuzz::snowflake::time::TimeBase;

const KEYS: [&str; 20] = [
    "version",
    "kind",
    "mark_unix_ms",
    "mark",
    "mark_sequence",
    "clock_back",
    "wall_unix_ms",
    "tick_ms",
    "sequence_bits",
    "layout",
    "epoch_unix_ms",
    "datacenter_id",
    "worker_id",
    "id_space",
    "current",
    "claimed_here",
    "claim",
    "reason",
    "sequence",
    "crc32",
];

#[derive(Arbitrary, Debug)]
enum Input<'a> {
    Bytes(&'a [u8]),
    /// Lines `key=value` of the format's keys, in any order, sealed.
    Lines(Vec<(u8, &'a str)>),
}

fuzz_target!(|input: Input<'_>| {
    let text = match input {
        Input::Bytes(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => text.to_string(),
            Err(_) => return,
        },
        Input::Lines(lines) => {
            seal(lines.iter().map(|(key, value)| format!("{}={value}\n", KEYS[*key as usize % KEYS.len()])).collect())
        }
    };
    let Ok(StateFile::Mark(record)) = parse(&text) else { return };
    let Ok(codec) = record.codec() else { return };
    let mark = record.mark.to_mark(&codec);
    let _ = record.to_mark();
    let own = {
        let r = preset::resolve("twitter").unwrap();
        Codec::new(r.layout, TimeBase::new(r.epoch, r.tick_ms).unwrap())
    };
    let _ = record.changed_scale(&own);
    let _ = record.changed_node(Node::default());
    // The lineage's numbers, and a claim chosen from them.
    let claims = record.claims.to_claims();
    let instance = Instance { host: "pg-3", data_dir: "/var/lib/postgresql/data", port: 5432 };
    let bits = codec.layout.width(Field::Worker);
    if let Ok(worker) = claims.choose(&instance, record.node.datacenter, bits, 2, record.mark.instant, 0) {
        assert!(!claims.holds(Node { datacenter: record.node.datacenter, worker }, record.mark.instant, 0));
    }
    let template = codec.template(record.node);
    let _ = Generator::new(template, Window::of(&template, &codec.time), Some(mark));
    // A record the server wrote reads back as it was.
    let again = parse(&record.render()).expect("a rendered record parses");
    assert_eq!(again, StateFile::Mark(record));
});
