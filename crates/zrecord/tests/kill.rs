//! Crash consistency under SIGKILL (docs/FORMAT.md, "Commit order",
//! "Delete", "Compact").
//!
//! A child process (this test binary, re-run with `CHILD_ENV` set) appends
//! batches to a store in a loop and prints `committed <b>` after each append
//! returns. In some rounds it deletes a fixed set of records after
//! `PRE_DELETE_BATCHES` batches, and in some it then compacts. The parent
//! kills it with SIGKILL at a random instant, reopens the store and checks
//! that it holds exactly one of the states the protocol allows:
//!
//! - *before*: the records of batches `0..k`, bit for bit, in order; or
//! - *after* (delete rounds): the records of batches `0..PRE_DELETE_BATCHES`
//!   with the delete applied (swap-last, as `Vec::swap_remove` does it),
//!   followed by the records of batches `PRE_DELETE_BATCHES..k`;
//!
//! where `k` is at least one more than the last batch the child reported, and
//! the state is *after* whenever the child reported the delete done. A
//! compaction must not change the content, so compact rounds allow the same
//! two states. The reopened store must then accept one more batch and a
//! compaction without losing anything (a wrong frontier would let the new
//! batch overwrite live records).
//!
//! Every batch is a pure function of its number, so the parent regenerates
//! whatever the child wrote. `ZRECORD_KILL_ROUNDS` sets the number of rounds
//! (default 200), `ZRECORD_KILL_SEED` the seed of the kill delays (default 0);
//! `scripts/kill-test.sh` runs 2000 rounds in release.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{compressible, noise, try_read_all, Rng};
use zrecord::{AppendOptions, Codec, Error, Store, StoreOptions, JOURNAL_FILE_NAME};

/// Path of the store the child writes; its presence makes the child run.
const CHILD_ENV: &str = "ZRECORD_KILL_CHILD";
/// What the child does besides appending: see [`Mode`].
const MODE_ENV: &str = "ZRECORD_KILL_MODE";
const ROUNDS_ENV: &str = "ZRECORD_KILL_ROUNDS";
const SEED_ENV: &str = "ZRECORD_KILL_SEED";
const DEFAULT_ROUNDS: u64 = 200;

/// Small chunks, so a few dozen batches roll over several chunk files.
const CHUNK_CAPACITY: u64 = 64 << 10;
/// Batches appended before the delete of delete and compact rounds.
const PRE_DELETE_BATCHES: u64 = 24;
/// The child stops appending after this many batches (and waits to be
/// killed), which bounds what the parent has to regenerate.
const MAX_BATCHES: u64 = 1500;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Appends only.
    Append,
    /// Appends, one delete, appends.
    Delete,
    /// Appends, one delete, one `compact`, appends.
    Compact,
    /// Appends, one delete, `compact_some` in small steps, appends.
    CompactSome,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Append => "append",
            Mode::Delete => "delete",
            Mode::Compact => "compact",
            Mode::CompactSome => "compact_some",
        }
    }

    fn from_name(name: &str) -> Mode {
        [Mode::Append, Mode::Delete, Mode::Compact, Mode::CompactSome]
            .into_iter()
            .find(|m| m.name() == name)
            .unwrap_or_else(|| panic!("unknown mode {name:?}"))
    }

    fn for_round(round: u64) -> Mode {
        match round % 5 {
            0 | 1 => Mode::Append,
            2 => Mode::Delete,
            3 => Mode::Compact,
            _ => Mode::CompactSome,
        }
    }

    fn deletes(self) -> bool {
        self != Mode::Append
    }

    fn compacts(self) -> bool {
        matches!(self, Mode::Compact | Mode::CompactSome)
    }

    /// The line after which the parent starts its kill delay, and the upper
    /// bound of that delay. The bounds are a little longer than the
    /// operation they aim at takes (debug build, disk-backed tempdir), so a
    /// good share of the kills land inside it. Delete rounds take the cube of
    /// the random fraction, so that some kills land in the first
    /// microseconds of the delete, before its journal is complete.
    fn trigger(self) -> (&'static str, Duration) {
        match self {
            Mode::Append => ("ready", Duration::from_millis(40)),
            Mode::Delete => ("deleting", Duration::from_millis(6)),
            Mode::Compact | Mode::CompactSome => ("compacting", Duration::from_millis(25)),
        }
    }
}

fn store_options() -> StoreOptions {
    StoreOptions {
        chunk_capacity: CHUNK_CAPACITY,
        ..StoreOptions::default()
    }
}

/// SplitMix64's finaliser: a well-mixed 64-bit hash of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The records of batch `b`: 1 to 12 of them, up to 3000 bytes each (some
/// empty), compressible, incompressible or constant by position.
fn batch(b: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng(mix(b) | 1);
    let n = 1 + rng.below(12) as usize;
    let fixed_len = rng.below(2500) as usize;
    (0..n)
        .map(|i| {
            let mut rng = Rng(mix(b.wrapping_mul(0x1_0000_0001) ^ mix(i as u64)) | 1);
            let len = match (b % 3, rng.below(10)) {
                (1, _) => fixed_len,
                (_, 0) => 0,
                _ => rng.below(3000) as usize,
            };
            match (b + i as u64) % 3 {
                0 => compressible(&mut rng, len),
                1 => noise(&mut rng, len),
                _ => vec![(b ^ i as u64) as u8; len],
            }
        })
        .collect()
}

fn append_options(b: u64) -> AppendOptions {
    AppendOptions {
        codec: Codec::ALL[(b / 3 % 4) as usize],
        durable: b % 7 == 3,
        ..AppendOptions::default()
    }
}

/// Appends batch `b` through `append`, `append_fixed` or `append_ragged`,
/// by `b % 3` (batches with `b % 3 == 1` have records of one length).
fn append_batch(store: &Store, b: u64) -> Result<u32, Error> {
    let recs = batch(b);
    let options = append_options(b);
    match b % 3 {
        0 => {
            let slices: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
            store.append(&slices, &options)
        }
        1 => store.append_fixed(&recs.concat(), recs.len(), recs[0].len(), &options),
        _ => {
            // Records in reverse order with a gap before each, so the
            // offsets matter.
            let mut src = Vec::new();
            let mut offsets = vec![0; recs.len()];
            for (i, r) in recs.iter().enumerate().rev() {
                src.extend_from_slice(b"gap");
                offsets[i] = src.len() as u64;
                src.extend_from_slice(r);
            }
            let lens: Vec<u32> = recs.iter().map(|r| r.len() as u32).collect();
            store.append_ragged(&src, &offsets, &lens, &options)
        }
    }
}

fn records_of(batches: std::ops::Range<u64>) -> Vec<Vec<u8>> {
    batches.flat_map(batch).collect()
}

/// The indices the child deletes: every fifth from 1, the last three, and 0,
/// of the records of batches `0..PRE_DELETE_BATCHES`.
fn delete_targets() -> Vec<u64> {
    let n = records_of(0..PRE_DELETE_BATCHES).len() as u64;
    let mut targets: Vec<u64> = (0..n).filter(|i| i % 5 == 1 || *i + 3 >= n).collect();
    targets.push(0);
    targets
}

/// What the delete must leave: each target, in descending order, replaced by
/// the last record (docs/FORMAT.md, "Delete").
fn after_delete() -> Vec<Vec<u8>> {
    let mut recs = records_of(0..PRE_DELETE_BATCHES);
    let mut targets = delete_targets();
    targets.sort_unstable_by(|a, b| b.cmp(a));
    targets.dedup();
    for t in targets {
        recs.swap_remove(t as usize);
    }
    recs
}

/// Starts every line the child reports, because the test harness may print
/// its own text (`test kill_child_writer ... `) at the start of a line.
const MARK: &str = "kill-child: ";

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{MARK}{line}").unwrap();
    out.flush().unwrap();
}

/// Not a test of its own: the child process that the parent kills.
#[test]
#[ignore = "run as a child process by a_killed_writer_leaves_a_state_the_protocol_allows"]
fn kill_child_writer() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mode = Mode::from_name(&std::env::var(MODE_ENV).unwrap());
    let targets = delete_targets();
    let mut store = Store::open_with(&path, &store_options()).unwrap();
    say("ready");
    for b in 0..MAX_BATCHES {
        if mode.deletes() && b == PRE_DELETE_BATCHES {
            say("deleting");
            store.delete(&targets).unwrap();
            say("deleted");
            if mode.compacts() {
                say("compacting");
                if mode == Mode::Compact {
                    assert!(store.compact().unwrap().finished);
                } else {
                    while !store.compact_some(3).unwrap().finished {}
                }
                say("compacted");
            }
        }
        append_batch(&store, b).unwrap();
        say(&format!("committed {b}"));
    }
    say("done");
    // Should the parent be gone, do not linger for ever.
    std::thread::sleep(Duration::from_secs(60));
}

/// What the child printed before it died.
#[derive(Debug, Default)]
struct Reported {
    /// The last batch reported committed.
    last_committed: Option<u64>,
    delete_started: bool,
    delete_done: bool,
    compact_started: bool,
    compact_done: bool,
}

impl Reported {
    fn saw(&mut self, line: &str) {
        match line {
            "deleting" => self.delete_started = true,
            "deleted" => self.delete_done = true,
            "compacting" => self.compact_started = true,
            "compacted" => self.compact_done = true,
            _ => {
                if let Some(b) = line.strip_prefix("committed ") {
                    self.last_committed = Some(b.parse().unwrap());
                }
            }
        }
    }
}

/// Which allowed state a store holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    /// Batches `0..batches` are in it.
    batches: u64,
    /// The delete has happened.
    deleted: bool,
}

/// Matches `found` against `base` followed by whole batches `first..`;
/// returns the end of the batches matched when that covers `found` exactly.
fn match_batches(found: &[Vec<u8>], base: &[Vec<u8>], first: u64) -> Option<u64> {
    if found.len() < base.len() || found[..base.len()] != *base {
        return None;
    }
    let mut at = base.len();
    let mut b = first;
    while at < found.len() {
        let recs = batch(b);
        if b >= MAX_BATCHES || found.len() - at < recs.len() || found[at..at + recs.len()] != recs {
            return None;
        }
        at += recs.len();
        b += 1;
    }
    Some(b)
}

/// The state `found` is in, or why it is in none the protocol allows given
/// what the child reported.
fn explain(found: &[Vec<u8>], mode: Mode, reported: &Reported) -> Result<State, String> {
    let mut candidates = Vec::new();
    if let Some(k) = match_batches(found, &[], 0) {
        if !mode.deletes() || k <= PRE_DELETE_BATCHES {
            candidates.push(State {
                batches: k,
                deleted: false,
            });
        }
    }
    if mode.deletes() {
        if let Some(k) = match_batches(found, &after_delete(), PRE_DELETE_BATCHES) {
            candidates.push(State {
                batches: k,
                deleted: true,
            });
        }
    }
    let allowed = |s: &State| {
        reported.last_committed.is_none_or(|c| s.batches > c)
            && (s.deleted || !reported.delete_done)
    };
    match candidates.iter().find(|s| allowed(s)) {
        Some(&s) => Ok(s),
        None if candidates.is_empty() => Err(format!(
            "the store's {} records are no allowed state: not a prefix of the batches{}",
            found.len(),
            if mode.deletes() {
                ", nor the delete's result followed by a prefix of the later batches"
            } else {
                ""
            }
        )),
        None => Err(format!(
            "the store is in state {candidates:?}, but the child had reported {reported:?}"
        )),
    }
}

/// The outcome of one round.
struct Outcome {
    state: State,
    reported: Reported,
}

fn spawn_child(path: &Path, mode: Mode) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "kill_child_writer",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, path)
        .env(MODE_ENV, mode.name())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// One round: start a child, kill it `delay_fraction` of the way into its
/// mode's kill window, and check the store it leaves.
fn round(dir: &Path, mode: Mode, delay_fraction: f64) -> Result<Outcome, String> {
    let path = dir.join("s.zr");
    drop(Store::open_with(&path, &store_options()).map_err(|e| format!("create: {e}"))?);
    let mut child = spawn_child(&path, mode);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        // Only whole lines count: each is one write(2) by the child.
        while stdout.read_line(&mut line).unwrap_or(0) > 0 && line.ends_with('\n') {
            if let Some((_, said)) = line.trim_end().split_once(MARK) {
                if tx.send(said.to_string()).is_err() {
                    break;
                }
            }
            line.clear();
        }
    });

    let (trigger, window) = mode.trigger();
    let mut reported = Reported::default();
    let start = Instant::now();
    let waited = loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => {
                reported.saw(&line);
                if line == trigger {
                    break Ok(());
                }
            }
            Err(_) => break Err(format!("no {trigger:?} line within {:?}", start.elapsed())),
        }
    };
    if waited.is_ok() {
        std::thread::sleep(window.mul_f64(delay_fraction));
    }
    let exited_early = child.try_wait().unwrap();
    let _ = child.kill();
    child.wait().unwrap();
    let mut stderr = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    if let Err(e) = waited {
        return Err(format!("{e}; child stderr: {stderr}"));
    }
    if let Some(status) = exited_early {
        return Err(format!(
            "the child exited by itself ({status}) before the kill; stderr: {stderr}"
        ));
    }
    // Everything the child wrote before it died is in the pipe.
    for line in rx.iter() {
        reported.saw(&line);
    }
    reader.join().unwrap();

    let reopen = || Store::open_with(&path, &store_options());
    let store = reopen().map_err(|e| format!("reopen after the kill: {e}"))?;
    let found = try_read_all(&store).map_err(|e| format!("read after the kill: {e}"))?;
    let state = explain(&found, mode, &reported)?;
    if path.join(JOURNAL_FILE_NAME).exists() {
        return Err("the delete journal is still there after the reopen".into());
    }
    let stats = store.stats();
    if stats.records != found.len() as u64 || stats.live_bytes > stats.chunk_bytes {
        return Err(format!("inconsistent stats after the kill: {stats:?}"));
    }

    // The store goes on: one more batch and a compaction lose nothing.
    let mut store = store;
    let next = state.batches;
    append_batch(&store, next).map_err(|e| format!("append after the kill: {e}"))?;
    let mut expected = found;
    expected.extend(batch(next));
    let check = |store: &Store, what: &str| -> Result<(), String> {
        let now = try_read_all(store).map_err(|e| format!("read {what}: {e}"))?;
        if now != expected {
            return Err(format!(
                "{what}: {} records, {} expected, first difference at {:?}",
                now.len(),
                expected.len(),
                now.iter().zip(&expected).position(|(a, b)| a != b)
            ));
        }
        Ok(())
    };
    check(&store, "after appending one more batch")?;
    store
        .compact()
        .map_err(|e| format!("compact after the kill: {e}"))?;
    check(&store, "after compacting")?;
    drop(store);
    check(
        &reopen().map_err(|e| format!("final reopen: {e}"))?,
        "after the final reopen",
    )?;
    Ok(Outcome { state, reported })
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

#[derive(Default)]
struct Tally {
    rounds: u64,
    by_mode: [u64; 4],
    /// Kills that landed between "deleting" and "deleted", split by the
    /// state found.
    mid_delete: [u64; 2],
    /// Kills that landed between "compacting" and "compacted".
    mid_compact: u64,
    batches_max: u64,
    failures: Vec<String>,
}

#[test]
fn a_killed_writer_leaves_a_state_the_protocol_allows() {
    let rounds = env_u64(ROUNDS_ENV, DEFAULT_ROUNDS);
    let seed = env_u64(SEED_ENV, 0);
    let started = Instant::now();
    let mut tally = Tally::default();
    for r in 0..rounds {
        let mode = Mode::for_round(r);
        let mut fraction = (mix(seed ^ mix(r)) % 10_000) as f64 / 10_000.0;
        if mode == Mode::Delete {
            fraction = fraction.powi(3);
        }
        let dir = tempfile::tempdir().unwrap();
        tally.rounds += 1;
        tally.by_mode[mode as usize] += 1;
        match round(dir.path(), mode, fraction) {
            Ok(Outcome { state, reported }) => {
                if reported.delete_started && !reported.delete_done {
                    tally.mid_delete[state.deleted as usize] += 1;
                }
                if reported.compact_started && !reported.compact_done {
                    tally.mid_compact += 1;
                }
                tally.batches_max = tally.batches_max.max(state.batches);
            }
            Err(e) => {
                let kept = dir.keep();
                let msg = format!(
                    "round {r} (mode {}, seed {seed}, delay {fraction:.4} of the window): {e} \
                     [store kept at {}]",
                    mode.name(),
                    kept.display()
                );
                eprintln!("FAIL {msg}");
                tally.failures.push(msg);
            }
        }
    }
    println!(
        "kill test: {} rounds, {} failures in {:.1}s; rounds by mode: append {}, delete {}, \
         compact {}, compact_some {}; killed mid-delete {} (found before {}, after {}); \
         killed mid-compact {}; most batches found {}",
        tally.rounds,
        tally.failures.len(),
        started.elapsed().as_secs_f64(),
        tally.by_mode[0],
        tally.by_mode[1],
        tally.by_mode[2],
        tally.by_mode[3],
        tally.mid_delete[0] + tally.mid_delete[1],
        tally.mid_delete[0],
        tally.mid_delete[1],
        tally.mid_compact,
        tally.batches_max,
    );
    assert!(
        tally.failures.is_empty(),
        "{} of {} rounds failed:\n{}",
        tally.failures.len(),
        tally.rounds,
        tally.failures.join("\n")
    );
}

/// The checker is not vacuous: states the protocol forbids are rejected.
#[test]
fn the_checker_rejects_what_the_protocol_forbids() {
    let done = |last: u64, deleted: bool| Reported {
        last_committed: Some(last),
        delete_started: deleted,
        delete_done: deleted,
        ..Reported::default()
    };
    let prefix = records_of(0..5);
    assert_eq!(
        explain(&prefix, Mode::Append, &done(4, false)),
        Ok(State {
            batches: 5,
            deleted: false
        })
    );
    // A commit the child saw return is missing.
    assert!(explain(&prefix, Mode::Append, &done(5, false)).is_err());
    // Half a batch.
    assert!(explain(
        &prefix[..prefix.len() - 1],
        Mode::Append,
        &Reported::default()
    )
    .is_err());
    // One record with a flipped bit.
    let mut flipped = prefix.clone();
    let victim = flipped.iter_mut().find(|r| !r.is_empty()).unwrap();
    victim[0] ^= 1;
    assert!(explain(&flipped, Mode::Append, &Reported::default()).is_err());
    // One record missing from the middle.
    let mut holed = prefix.clone();
    holed.remove(1);
    assert!(explain(&holed, Mode::Append, &Reported::default()).is_err());

    let mut after = after_delete();
    after.extend(records_of(PRE_DELETE_BATCHES..PRE_DELETE_BATCHES + 2));
    let before = records_of(0..PRE_DELETE_BATCHES);
    let reported = done(PRE_DELETE_BATCHES - 1, false);
    assert!(explain(&before, Mode::Delete, &reported).is_ok());
    assert!(explain(&after, Mode::Delete, &done(PRE_DELETE_BATCHES + 1, true)).is_ok());
    // The delete was reported done, yet the store is from before it.
    assert!(explain(&before, Mode::Delete, &done(PRE_DELETE_BATCHES - 1, true)).is_err());
    // Appends after the delete point without the delete.
    assert!(explain(
        &records_of(0..PRE_DELETE_BATCHES + 1),
        Mode::Delete,
        &reported
    )
    .is_err());
    // Half a delete: only the highest target removed, and only the lowest.
    let mut targets = delete_targets();
    targets.sort_unstable();
    for partial in [&targets[targets.len() - 1..], &targets[..1]] {
        let mut half = before.clone();
        let mut t = partial.to_vec();
        t.sort_unstable_by(|a, b| b.cmp(a));
        for i in t {
            half.swap_remove(i as usize);
        }
        assert!(explain(&half, Mode::Delete, &reported).is_err());
    }
    // A survivor in two slots: the last record copied into a hole while the
    // length was not yet lowered.
    let mut doubled = before.clone();
    doubled[targets[0] as usize] = doubled.last().unwrap().clone();
    assert!(explain(&doubled, Mode::Delete, &reported).is_err());
}
