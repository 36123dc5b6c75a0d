use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier};

use ferrotx_cluster::{NO_NODE, ViewMember};

use super::*;

/// A directory under the system temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("ferrotx-coord-{name}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        Self(dir)
    }

    /// The state file (inside a directory that `open` has to create).
    fn state(&self) -> PathBuf {
        self.0.join("sub").join("cluster.toml.state.toml")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A view of `id` whose members are `nodes` (incarnation 1), with 4 partitions on them.
fn view(id: u64, nodes: &[u16]) -> View {
    let members: Vec<ViewMember> = nodes
        .iter()
        .map(|&node| ViewMember {
            node,
            incarnation: 1,
        })
        .collect();
    let copies = (0..4)
        .map(|p| {
            if nodes.is_empty() {
                Vec::new()
            } else {
                vec![nodes[p % nodes.len()]]
            }
        })
        .collect();
    View {
        id,
        cm: nodes.first().copied().unwrap_or(NO_NODE),
        members,
        copies,
        filling: Vec::new(),
        suspended: Vec::new(),
        suspended_copies: Vec::new(),
    }
}

fn conflict_id(r: Result<(), CoordinationError>) -> Option<u64> {
    match r {
        Err(CoordinationError::Conflict(v)) => v.map(|v| v.id),
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[test]
fn the_default_state_path_appends_to_the_file_name() {
    assert_eq!(
        default_state_path(Path::new("/etc/x/cluster.toml")),
        PathBuf::from("/etc/x/cluster.toml.state.toml")
    );
    assert_eq!(
        default_state_path(Path::new("cluster.toml")),
        PathBuf::from("cluster.toml.state.toml")
    );
}

#[test]
fn two_nodes_race_and_only_the_expected_id_is_replaced() {
    let dir = TempDir::new("race");
    let mut a = FileCoordination::open(dir.state(), 0).unwrap();
    let mut b = FileCoordination::open(dir.state(), 1).unwrap();
    assert_eq!(a.read().unwrap(), None);
    assert!(!dir.state().exists());

    a.compare_and_swap(None, &view(1, &[0, 1])).unwrap();
    // b raced with a from "no view" and loses, learning the winner's view.
    assert_eq!(
        conflict_id(b.compare_and_swap(None, &view(1, &[1]))),
        Some(1)
    );
    assert_eq!(b.read().unwrap(), Some(view(1, &[0, 1])));

    b.compare_and_swap(Some(1), &view(2, &[1])).unwrap();
    assert_eq!(
        conflict_id(a.compare_and_swap(Some(1), &view(2, &[0]))),
        Some(2)
    );
    // An id that does not grow is refused even when the expected id matches.
    assert_eq!(
        conflict_id(a.compare_and_swap(Some(2), &view(2, &[0]))),
        Some(2)
    );
    assert_eq!(
        conflict_id(a.compare_and_swap(Some(2), &view(1, &[0]))),
        Some(2)
    );
    assert_eq!(a.read().unwrap(), Some(view(2, &[1])));
    // No temporary file is left behind.
    assert!(!with_suffix(&dir.state(), ".tmp").exists());
}

#[test]
fn a_conflict_carries_the_whole_current_view() {
    let dir = TempDir::new("conflict");
    let mut a = FileCoordination::open(dir.state(), 0).unwrap();
    let stored = view(7, &[0, 2, 5]);
    a.compare_and_swap(None, &stored).unwrap();
    match a.compare_and_swap(Some(6), &view(8, &[0])) {
        Err(CoordinationError::Conflict(Some(v))) => assert_eq!(*v, stored),
        other => panic!("{other:?}"),
    }
    match a.compare_and_swap(None, &view(8, &[0])) {
        Err(CoordinationError::Conflict(Some(v))) => assert_eq!(*v, stored),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_malformed_file_is_unavailable_and_named() {
    let dir = TempDir::new("malformed");
    let mut a = FileCoordination::open(dir.state(), 0).unwrap();
    fs::write(dir.state(), "id = \"not a number\"\n").unwrap();
    let name = dir.state().display().to_string();
    for r in [
        a.read().map(|_| ()),
        a.compare_and_swap(None, &view(1, &[0])),
        a.compare_and_swap(Some(1), &view(2, &[0])),
        a.retire_if_dead().map(|_| ()),
    ] {
        match r {
            Err(CoordinationError::Unavailable(msg)) => {
                assert!(msg.contains(&name), "{msg}");
                assert!(msg.contains("malformed"), "{msg}");
            }
            other => panic!("{other:?}"),
        }
    }
    // The bad file was left alone.
    assert_eq!(
        fs::read_to_string(dir.state()).unwrap(),
        "id = \"not a number\"\n"
    );
}

#[test]
fn a_node_cannot_be_opened_twice_while_it_lives() {
    let dir = TempDir::new("liveness");
    let a = FileCoordination::open(dir.state(), 3).unwrap();
    assert_eq!(a.node(), 3);
    assert_eq!(a.path(), dir.state());
    let err = FileCoordination::open(dir.state(), 3).unwrap_err();
    assert!(
        matches!(err, OpenError::NodeRunning { node: 3, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.starts_with("node 3 already runs on this coordination file (lock held: "),
        "{msg}"
    );
    assert!(msg.contains("cluster.toml.state.toml.node-3.lock"), "{msg}");
    // Another node is fine, and node 3 again once the first value is gone.
    let _b = FileCoordination::open(dir.state(), 4).unwrap();
    drop(a);
    let _a = FileCoordination::open(dir.state(), 3).unwrap();
}

#[test]
fn a_dead_cluster_is_retired_and_a_live_one_is_not() {
    let dir = TempDir::new("retire");
    let mut a = FileCoordination::open(dir.state(), 0).unwrap();
    // Nothing stored: nothing to retire.
    assert_eq!(a.retire_if_dead().unwrap(), None);

    let stored = view(5, &[0, 1, 2]);
    a.compare_and_swap(None, &stored).unwrap();
    // Node 1 lives; node 2 never ran (no lock file); node 0 is us, an earlier life.
    let b = FileCoordination::open(dir.state(), 1).unwrap();
    assert_eq!(a.retire_if_dead().unwrap(), None);
    assert_eq!(a.read().unwrap(), Some(stored.clone()));

    // Node 1 dies (its lock file stays, unlocked).
    drop(b);
    assert!(node_lock_path(&dir.state(), 1).exists());
    assert_eq!(a.retire_if_dead().unwrap(), Some(5));
    let ended = a.read().unwrap().unwrap();
    assert!(ended.is_ended());
    assert_eq!(ended, View::ended(5, stored.copies.len()));
    // Already ended: nothing more to do, and the next cluster starts above id 5.
    assert_eq!(a.retire_if_dead().unwrap(), None);
    assert_eq!(
        conflict_id(a.compare_and_swap(Some(5), &view(5, &[0]))),
        Some(5)
    );
    a.compare_and_swap(Some(5), &view(6, &[0])).unwrap();

    // The probes released the locks they took: node 1 and node 2 can start.
    let _b = FileCoordination::open(dir.state(), 1).unwrap();
    let _c = FileCoordination::open(dir.state(), 2).unwrap();
}

#[test]
fn a_view_of_only_ourselves_is_retired() {
    let dir = TempDir::new("self");
    let mut a = FileCoordination::open(dir.state(), 2).unwrap();
    a.compare_and_swap(None, &view(9, &[2])).unwrap();
    assert_eq!(a.retire_if_dead().unwrap(), Some(9));
    assert_eq!(a.read().unwrap(), Some(View::ended(9, 4)));
}

#[test]
fn eight_threads_racing_never_write_an_id_twice() {
    const THREADS: u16 = 8;
    const ROUNDS: usize = 50;
    const INITIAL: u64 = 100;
    let dir = TempDir::new("threads");
    let state = dir.state();
    {
        let mut setup = FileCoordination::open(&state, THREADS).unwrap();
        setup.compare_and_swap(None, &view(INITIAL, &[0])).unwrap();
    }
    let barrier = Arc::new(Barrier::new(usize::from(THREADS)));
    let handles: Vec<_> = (0..THREADS)
        .map(|node| {
            let state = state.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut c = FileCoordination::open(&state, node).unwrap();
                barrier.wait();
                let mut won = Vec::new();
                for _ in 0..ROUNDS {
                    let current = c.read().unwrap().unwrap().id;
                    let next = view(current + 1, &[node]);
                    match c.compare_and_swap(Some(current), &next) {
                        Ok(()) => won.push(next.id),
                        Err(CoordinationError::Conflict(Some(v))) => assert!(v.id > current),
                        Err(e) => panic!("{e:?}"),
                    }
                }
                won
            })
        })
        .collect();
    let mut ids = BTreeSet::new();
    let mut successes = 0u64;
    for h in handles {
        for id in h.join().unwrap() {
            successes += 1;
            assert!(ids.insert(id), "id {id} was written twice");
        }
    }
    let mut reader = FileCoordination::open(&state, THREADS).unwrap();
    let last = reader.read().unwrap().unwrap().id;
    assert!(successes > 0);
    assert_eq!(last, INITIAL + successes);
    // Exactly the ids after the initial one, each once.
    assert_eq!(ids, (INITIAL + 1..=last).collect::<BTreeSet<_>>());
}

/// Issue 31: a state file deleted while the cluster runs is an error that names it (a swap
/// used to answer a conflict with no view, which membership took for a lost race, for
/// good); restored, swaps go on.
#[test]
fn a_deleted_state_file_is_an_error_that_names_it() {
    let dir = TempDir::new("deleted");
    let mut c = FileCoordination::open(dir.state(), 0).unwrap();
    c.compare_and_swap(None, &view(1, &[0, 1])).unwrap();
    let saved = fs::read(dir.state()).unwrap();
    fs::remove_file(dir.state()).unwrap();
    refused_naming(&mut c, &dir.state(), "missing");
    // Another node's value, opened after the deletion, has seen nothing: no cluster yet.
    let mut fresh = FileCoordination::open(dir.state(), 1).unwrap();
    assert_eq!(fresh.read().unwrap(), None);
    fs::write(dir.state(), saved).unwrap();
    c.compare_and_swap(Some(1), &view(2, &[0])).unwrap();
    assert_eq!(c.read().unwrap().unwrap().id, 2);
}

/// A corrupt state file is an error that names it.
#[test]
fn a_corrupt_state_file_is_an_error_that_names_it() {
    let dir = TempDir::new("corrupt");
    let mut c = FileCoordination::open(dir.state(), 0).unwrap();
    c.compare_and_swap(None, &view(1, &[0, 1])).unwrap();
    fs::write(dir.state(), "id = [not a view").unwrap();
    refused_naming(&mut c, &dir.state(), "malformed");
}

/// Both a swap and a read through `c` fail as unavailable, naming `state` and `why`.
fn refused_naming(c: &mut FileCoordination, state: &Path, why: &str) {
    for result in [
        c.compare_and_swap(Some(1), &view(2, &[0])).map(|()| None),
        c.read(),
    ] {
        match result {
            Err(CoordinationError::Unavailable(e)) => {
                assert!(e.contains(&state.display().to_string()), "{e}");
                assert!(e.contains(why), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }
}

/// Issue 31: the state lock held by another holder (here another open file description
/// in this process, as `flock` sees another process) fails a swap within the lock
/// timeout, naming the lock and changing nothing; released, the swap goes in.
#[test]
fn a_held_state_lock_fails_a_swap_in_time_and_changes_nothing() {
    let dir = TempDir::new("held");
    let mut c = FileCoordination::open(dir.state(), 0).unwrap();
    c.compare_and_swap(None, &view(1, &[0, 1])).unwrap();
    c.set_lock_timeout(Duration::from_millis(150));
    let lock_path = with_suffix(&dir.state(), ".lock");
    let holder = open_lock_file(&lock_path).unwrap();
    holder.lock().unwrap();
    let started = std::time::Instant::now();
    match c.compare_and_swap(Some(1), &view(2, &[0])) {
        Err(CoordinationError::Unavailable(e)) => {
            assert!(e.contains(&lock_path.display().to_string()), "{e}");
            assert!(e.contains("held by another process"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_secs(2),
        "{took:?}"
    );
    // Reads take no lock.
    assert_eq!(c.read().unwrap().unwrap().id, 1);
    drop(holder);
    c.compare_and_swap(Some(1), &view(2, &[0])).unwrap();
    assert_eq!(c.read().unwrap().unwrap().id, 2);
}

#[test]
fn a_cluster_that_ended_on_disk_keeps_its_copies_and_a_newer_life_proves_a_member_dead() {
    let dir = TempDir::new("on-disk");
    let mut a = FileCoordination::open_life(dir.state(), 0, 7).unwrap();
    assert_eq!(a.end_on_disk_if_dead().unwrap(), None);
    let stored = view(5, &[0, 1, 2]);
    a.compare_and_swap(None, &stored).unwrap();
    // Node 1's member life (incarnation 1) holds its lock: alive.
    let b = FileCoordination::open_life(dir.state(), 1, 1).unwrap();
    assert_eq!(a.end_on_disk_if_dead().unwrap(), None);
    assert!(a.running_cluster().unwrap().is_some());
    drop(b);
    // A newer life of node 1 holds the lock: the member life is dead all the same (a
    // whole cluster started again at once).
    let _b = FileCoordination::open_life(dir.state(), 1, 2).unwrap();
    assert_eq!(a.running_cluster().unwrap(), None);
    let ended = a.end_on_disk_if_dead().unwrap().expect("ended on disk");
    assert_eq!(ended, stored.ended_on_disk());
    assert_eq!(a.read().unwrap(), Some(ended.clone()));
    // Asked again (another node starting): the same view, unchanged.
    assert_eq!(a.end_on_disk_if_dead().unwrap(), Some(ended));
    // A holder that wrote no life (a tool) counts as alive.
    let mut c = FileCoordination::open(dir.state(), 2).unwrap();
    let running = view(6, &[0, 2]);
    c.compare_and_swap(Some(5), &running).unwrap();
    assert_eq!(a.end_on_disk_if_dead().unwrap(), None);
}
