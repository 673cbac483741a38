//! A job's record on disk, so that a job running when the process died
//! goes on after a restart: `<dir>/<id>.json` holds its spec and how it
//! stands (rewritten whole, atomically, when that changes), and
//! `<dir>/<id>.done` the metatiles it has stored, appended in batches with
//! one `fdatasync` per batch. A metatile is appended only once stored; one
//! stored but not yet appended when the process died is found stored and
//! skipped by a seed, or rendered again by a reseed. A torn last entry
//! (the process died mid-write) is ignored.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use super::spec::JobSpec;

/// Bytes of one entry of a `.done` file: the plan's index (u32) and the
/// metatile's place in that plan's order (u64), little-endian.
const ENTRY: usize = 12;

/// How a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Working (or to be resumed, when read at start).
    Running,
    /// Every planned tile is done.
    Done,
    /// Stopped by an error.
    Failed,
    /// Stopped on request.
    Cancelled,
}

/// The `.json` part of a record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recorded {
    /// What was asked.
    pub spec: JobSpec,
    /// How it stands.
    pub state: JobState,
    /// When it was created, in seconds since the Unix epoch.
    pub created: u64,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where a job's record is kept.
#[derive(Debug, Clone)]
pub struct RecordPath {
    dir: PathBuf,
    id: String,
}

impl RecordPath {
    /// The record of job `id` in `dir`.
    pub fn new(dir: &Path, id: &str) -> RecordPath {
        RecordPath {
            dir: dir.to_path_buf(),
            id: id.to_string(),
        }
    }

    fn json(&self) -> PathBuf {
        self.dir.join(format!("{}.json", self.id))
    }

    fn done_file(&self) -> PathBuf {
        self.dir.join(format!("{}.done", self.id))
    }

    /// Writes the `.json` part: a temporary file, synced, renamed over the
    /// old one, and the directory synced.
    pub fn write(&self, recorded: &Recorded) -> io::Result<()> {
        let tmp = self.dir.join(format!("{}.json.tmp", self.id));
        let text = serde_json::to_vec_pretty(recorded).map_err(io::Error::other)?;
        let mut f = File::create(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        std::fs::rename(&tmp, self.json())?;
        File::open(&self.dir)?.sync_all()
    }

    /// The metatiles recorded done, by plan index.
    pub fn done(&self) -> io::Result<HashMap<u32, HashSet<u64>>> {
        let mut bytes = Vec::new();
        match File::open(self.done_file()) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut done: HashMap<u32, HashSet<u64>> = HashMap::new();
        for entry in bytes.chunks_exact(ENTRY) {
            let (plan, place) = entry.split_at(4);
            let plan = u32::from_le_bytes(plan.try_into().expect("4 bytes"));
            let place = u64::from_le_bytes(place.try_into().expect("8 bytes"));
            done.entry(plan).or_default().insert(place);
        }
        Ok(done)
    }

    /// Starts the writer that appends done metatiles to the `.done` file.
    pub fn done_writer(&self) -> io::Result<DoneWriter> {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.done_file())?;
        // A torn entry at the end would shift every later one: cut it.
        let len = file.metadata()?.len();
        let whole = len - len % ENTRY as u64;
        if whole != len {
            file.set_len(whole)?;
        }
        let (sender, receiver) = mpsc::channel::<(u32, Vec<u64>)>();
        let id = self.id.clone();
        let thread = std::thread::Builder::new()
            .name("tessera-job-record".into())
            .spawn(move || append_batches(&mut file, &receiver, &id))?;
        Ok(DoneWriter {
            sender: Some(sender),
            thread: Some(thread),
        })
    }

    /// Every record in `dir`: job id and its `.json` part. Unreadable
    /// records are logged and left out.
    pub fn read_all(dir: &Path) -> io::Result<Vec<(String, Recorded)>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let Some(id) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".json"))
            else {
                continue;
            };
            match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<Recorded>(&b).map_err(|e| e.to_string()))
            {
                Ok(r) => out.push((id.to_string(), r)),
                Err(e) => {
                    tracing::error!(record = %path.display(), error = %e, "a job record cannot be read");
                }
            }
        }
        out.sort_by(|a, b| a.1.created.cmp(&b.1.created).then(a.0.cmp(&b.0)));
        Ok(out)
    }
}

/// Appends done metatiles on its own thread, each batch (whatever arrived
/// while the last was being synced) with one `fdatasync`.
#[derive(Debug)]
pub struct DoneWriter {
    sender: Option<mpsc::Sender<(u32, Vec<u64>)>>,
    thread: Option<JoinHandle<()>>,
}

impl DoneWriter {
    /// Records `places` of plan `plan` as done (written soon, not before
    /// this returns).
    pub fn record(&self, plan: u32, places: &[u64]) {
        if let Some(s) = &self.sender {
            let _ = s.send((plan, places.to_vec()));
        }
    }

    /// Writes and syncs what is queued, then stops the thread.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.sender.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DoneWriter {
    fn drop(&mut self) {
        self.stop();
    }
}

fn append_batches(file: &mut File, receiver: &mpsc::Receiver<(u32, Vec<u64>)>, id: &str) {
    let mut buffer = Vec::new();
    while let Ok(first) = receiver.recv() {
        buffer.clear();
        let mut add = |(plan, places): (u32, Vec<u64>)| {
            for place in places {
                buffer.extend_from_slice(&plan.to_le_bytes());
                buffer.extend_from_slice(&place.to_le_bytes());
            }
        };
        add(first);
        while let Ok(more) = receiver.try_recv() {
            add(more);
        }
        if let Err(e) = file.write_all(&buffer).and_then(|()| file.sync_data()) {
            // The job goes on; after a restart it finds these metatiles
            // stored (a seed) or renders them again (a reseed).
            tracing::warn!(job = %id, error = %e, "cannot record done metatiles");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::spec::JobKind;

    fn recorded() -> Recorded {
        Recorded {
            spec: serde_json::from_value(serde_json::json!({
                "kind": "seed", "layer": "relief", "zoom": "2"
            }))
            .unwrap(),
            state: JobState::Running,
            created: 7,
            error: None,
        }
    }

    #[test]
    fn done_metatiles_survive_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let record = RecordPath::new(dir.path(), "j1");
        record.write(&recorded()).unwrap();
        let writer = record.done_writer().unwrap();
        writer.record(0, &[3, 5]);
        writer.record(1, &[9]);
        writer.finish();
        // Half an entry, as a crash mid-write leaves.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join("j1.done"))
            .unwrap();
        f.write_all(&[1, 2, 3]).unwrap();
        drop(f);
        let done = record.done().unwrap();
        assert_eq!(done[&0], HashSet::from([3, 5]));
        assert_eq!(done[&1], HashSet::from([9]));
        // Appending again cuts the torn entry first.
        let writer = record.done_writer().unwrap();
        writer.record(0, &[4]);
        writer.finish();
        let done = record.done().unwrap();
        assert_eq!(done[&0], HashSet::from([3, 4, 5]));
        assert_eq!(done[&1], HashSet::from([9]));
        let all = RecordPath::read_all(dir.path()).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].0, "j1");
        assert_eq!(all[0].1.spec.kind, JobKind::Seed);
    }
}
