//! The fault campaign's driver (`bash scripts/campaign`): a fleet of
//! throwaway servers on loopback, clients generating IDs against it, and
//! faults drawn from a seed. It records every ID that reached a client, every
//! error, and every fault; `scripts/campaign-check`, a separate program,
//! judges the record.
//!
//! The same seed gives the same schedule of faults and workload steps; the
//! timings vary. Every loop is bounded, the run stops by itself, and the
//! servers and their directories are removed at the end.
//!
//! Usage: campaign --seed S --minutes M --out DIR [--clients N]

#[path = "../../tests/common/mod.rs"]
mod common;
mod fleet;
mod net;
mod partitions;
mod record;
mod rng;
mod workload;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet::{run_fault, Fleet, KINDS};
use record::Recorder;
use rng::Rng;

struct Args {
    seed: u64,
    minutes: f64,
    out: PathBuf,
    clients: usize,
}

fn args() -> Args {
    let mut a = Args { seed: 0, minutes: 5.0, out: PathBuf::from("campaign-out"), clients: 4 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--seed" => a.seed = value.parse().expect("--seed: a number"),
            "--minutes" => a.minutes = value.parse().expect("--minutes: a number"),
            "--out" => a.out = PathBuf::from(value),
            "--clients" => a.clients = value.parse().expect("--clients: a number"),
            _ => panic!("unknown option {flag}"),
        }
    }
    a
}

fn main() {
    let args = args();
    std::fs::create_dir_all(&args.out).unwrap();
    let rec = Recorder::new(&args.out.join("history.csv"), &args.out.join("errors.csv"), &args.out.join("events.csv"));
    // Lineage P starts with worker_id = auto or with its number set by hand,
    // as the seed says; half the failovers switch it.
    let p_auto = Rng::fork(args.seed, 2).chance(50);
    println!("campaign: setting up the fleet, lineage P with worker_id = {}", fleet::p_worker_setting(p_auto));
    let mut fleet = Fleet::start(rec.clone(), p_auto);
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..args.clients)
        .map(|n| {
            let (targets, rec, stop) = (fleet.targets.clone(), rec.clone(), stop.clone());
            let seed = args.seed;
            std::thread::spawn(move || workload::run(n, seed, targets, rec, stop))
        })
        .collect();

    // Every kind first, in an order drawn from the seed, then kinds drawn at
    // random; a pause drawn from the seed before each. Every kind runs at
    // least once however long that takes: a slow machine runs longer rather
    // than leave kinds out.
    let mut rng = Rng::fork(args.seed, 1);
    let mut order: Vec<&str> = KINDS.to_vec();
    rng.shuffle(&mut order);
    let deadline = Instant::now() + Duration::from_secs_f64(args.minutes * 60.0);
    let mut step = 0;
    loop {
        let pause = Duration::from_millis(rng.range(1000, 4000));
        if step >= order.len() && Instant::now() + pause >= deadline {
            break;
        }
        std::thread::sleep(pause);
        let kind = if step < order.len() { order[step] } else { *rng.pick(&KINDS) };
        step += 1;
        run_fault(&mut fleet, kind, &mut rng);
    }
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));

    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = c.join();
    }
    // What the aggregator reported, for the checker; it has applied what it
    // will by now or never (a subscription whose publisher is gone).
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(args.out.join("aggregator.log"), fleet.aggregator_log()).unwrap();
    rec.flush();
    println!("campaign: {} IDs recorded, {step} faults; stopping the fleet", rec.count());
    drop(fleet);
}
