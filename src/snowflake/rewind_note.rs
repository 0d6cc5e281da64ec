//! The note a server with a number set by hand keeps after pg_rewind
//! (`snowflake_id.rewound`): pg_rewind replaces every file of the data
//! directory with its source's, the state file among them, so the marks of
//! the IDs this server issued on the timeline it left are gone with the
//! WAL that carried them. Which number issued them, and when the rewind was
//! first seen, is all that is left to say.
//!
//! Invariant: while the note is there, a server with its number set by hand
//! issues no ID, whatever that number is now (pg_rewind may have copied its
//! source's configuration, so the number it had before is not known): its
//! own IDs from before the rewind may lie anywhere below its clock of then,
//! plus what a clock running ahead added. Only a floor a DBA raises ends it.
//! `node` is the number it started with after the rewind, for the record.

use std::fmt;

use super::codec::Node;
use super::time::UnixMillis;

/// What the note says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RewindNote {
    /// The number this server generated with before the rewind.
    pub node: Node,
    /// The wall clock when the server first started after the rewind.
    pub seen_at: UnixMillis,
}

const HEADER: &str = "# snowflake_id: this data directory was rewound by pg_rewind";

impl RewindNote {
    /// The note's text: a header, then `key=value` lines, with a comment
    /// for the person who finds the file.
    pub fn render(&self) -> String {
        format!(
            "{HEADER}\n# The IDs it issued before are unknown: it issues none with this number until a floor is \
             raised\n# (SELECT snowflake_raise_floor(...)); the server removes this file then.\ndatacenter={}\n\
             worker={}\nseen_at={}\n",
            self.node.datacenter, self.node.worker, self.seen_at.0
        )
    }

    /// Reads a note written by [`RewindNote::render`].
    pub fn parse(text: &str) -> Result<RewindNote, BadNote> {
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return Err(BadNote("it does not start with the note's header"));
        }
        let (mut datacenter, mut worker, mut seen_at) = (None, None, None);
        for line in lines.filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let (key, value) = line.split_once('=').ok_or(BadNote("a line is not key=value"))?;
            let slot = match key {
                "datacenter" => &mut datacenter,
                "worker" => &mut worker,
                "seen_at" => &mut seen_at,
                _ => return Err(BadNote("it has a key the note does not have")),
            };
            *slot = Some(value.parse::<i64>().map_err(|_| BadNote("a value is not a number"))?);
        }
        let number = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok()).ok_or(BadNote("a number is missing"));
        Ok(RewindNote {
            node: Node { datacenter: number(datacenter)?, worker: number(worker)? },
            seen_at: UnixMillis(seen_at.ok_or(BadNote("seen_at is missing"))?),
        })
    }
}

/// A note that cannot be read; its number is then taken to be any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadNote(pub &'static str);

impl fmt::Display for BadNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn a_rendered_note_reads_back(datacenter in 0u64..1 << 10, worker in 0u64..1 << 10, at in 0i64..1 << 45) {
            let note = RewindNote { node: Node { datacenter, worker }, seen_at: UnixMillis(at) };
            prop_assert_eq!(RewindNote::parse(&note.render()), Ok(note));
        }
    }

    #[test]
    fn a_damaged_note_is_an_error_not_a_default() {
        let good = RewindNote { node: Node { datacenter: 1, worker: 2 }, seen_at: UnixMillis(5) }.render();
        assert!(RewindNote::parse("").is_err());
        assert!(RewindNote::parse(&good.replace("worker=2\n", "")).is_err());
        assert!(RewindNote::parse(&good.replace("worker=2", "worker=-2")).is_err());
        assert!(RewindNote::parse(&good.replace("worker=2", "worker=two")).is_err());
        assert!(RewindNote::parse(&good.replace("seen_at", "when")).is_err());
        assert!(RewindNote::parse(&good.replacen("# snowflake_id", "# other", 1)).is_err());
    }
}
