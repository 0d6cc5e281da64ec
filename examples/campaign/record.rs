//! What the campaign writes for the checker: the history of every ID that
//! reached a client, the errors clients saw, and the faults with their
//! windows. Plain CSV files; the checker (scripts/campaign-check) reads
//! nothing else from this program.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch, by the real clock (the servers' clocks
/// may be stepped; the history's are not).
pub fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// A CSV field that may hold commas, quotes or line breaks.
fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('"', "\"\""))
}

/// One ID a client received.
pub struct Id {
    pub id: i64,
    pub server: String,
    pub lineage: &'static str,
    pub timeline: i32,
    pub client: usize,
    pub kind: &'static str,
    pub started_us: i64,
    pub ended_us: i64,
    pub committed: bool,
}

struct Files {
    history: BufWriter<File>,
    errors: BufWriter<File>,
    events: BufWriter<File>,
    /// The largest ID each lineage handed to a client so far: what "got
    /// out", for the floors the documented procedures raise.
    max_by_lineage: HashMap<&'static str, i64>,
    watched: HashMap<String, Watch>,
    ids: u64,
}

/// A lineage under watch: its largest ID when the watch began, and the IDs
/// since, with when their calls ended.
#[derive(Default)]
struct Watch {
    largest_before: Option<i64>,
    kept: Vec<(i64, i64)>,
}

/// The recorder every thread shares.
#[derive(Clone)]
pub struct Recorder(Arc<Mutex<Files>>);

fn create(path: &Path, header: &str) -> BufWriter<File> {
    let mut w = BufWriter::new(File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
    writeln!(w, "{header}").unwrap();
    w
}

impl Recorder {
    pub fn new(history: &Path, errors: &Path, events: &Path) -> Recorder {
        Recorder(Arc::new(Mutex::new(Files {
            history: create(history, "id,server,timeline,client,kind,started_us,ended_us,committed,lineage"),
            errors: create(errors, "at_us,client,server,lineage,kind,sqlstate,message"),
            events: create(events, "started_us,ended_us,kind,target,detail"),
            max_by_lineage: HashMap::new(),
            watched: HashMap::new(),
            ids: 0,
        })))
    }

    pub fn ids(&self, ids: &[Id]) {
        let mut f = self.0.lock().unwrap();
        for i in ids {
            writeln!(
                f.history,
                "{},{},{},{},{},{},{},{},{}",
                i.id, i.server, i.timeline, i.client, i.kind, i.started_us, i.ended_us, i.committed, i.lineage
            )
            .unwrap();
            let max = f.max_by_lineage.entry(i.lineage).or_insert(i64::MIN);
            *max = (*max).max(i.id);
            if let Some(w) = f.watched.get_mut(i.lineage) {
                w.kept.push((i.ended_us, i.id));
            }
        }
        f.ids += ids.len() as u64;
    }

    #[allow(clippy::too_many_arguments)]
    pub fn error(&self, client: usize, server: &str, lineage: &str, kind: &str, sqlstate: &str, message: &str) {
        let mut f = self.0.lock().unwrap();
        writeln!(f.errors, "{},{client},{server},{lineage},{kind},{sqlstate},{}", now_us(), quoted(message)).unwrap();
    }

    pub fn event(&self, started_us: i64, kind: &str, target: &str, detail: &str) {
        let mut f = self.0.lock().unwrap();
        writeln!(f.events, "{started_us},{},{kind},{target},{}", now_us(), quoted(detail)).unwrap();
        f.events.flush().unwrap();
    }

    /// The largest ID of `lineage` that reached a client so far.
    pub fn max_of(&self, lineage: &str) -> Option<i64> {
        self.0.lock().unwrap().max_by_lineage.get(lineage).copied()
    }

    /// From now on, keeps every ID of `lineage` with its call's end, until
    /// `largest_ended_before`.
    pub fn watch(&self, lineage: &str) {
        let mut f = self.0.lock().unwrap();
        let largest = f.max_by_lineage.get(lineage).copied();
        f.watched.insert(lineage.to_string(), Watch { largest_before: largest, kept: Vec::new() });
    }

    /// The largest ID of `lineage` whose call ended before `before_us`
    /// (micros, by `now_us`): those before the watch began, and the ones it
    /// kept. Ends the watch.
    pub fn largest_ended_before(&self, lineage: &str, before_us: i64) -> Option<i64> {
        let w = self.0.lock().unwrap().watched.remove(lineage).unwrap_or_default();
        let during = w.kept.iter().filter(|(ended, _)| *ended < before_us).map(|(_, id)| *id).max();
        w.largest_before.max(during)
    }

    pub fn count(&self) -> u64 {
        self.0.lock().unwrap().ids
    }

    pub fn flush(&self) {
        let mut f = self.0.lock().unwrap();
        f.history.flush().unwrap();
        f.errors.flush().unwrap();
        f.events.flush().unwrap();
    }
}
