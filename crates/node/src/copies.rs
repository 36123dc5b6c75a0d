//! What a node holds, for checks: each partition copy of its current view with its role,
//! and for each table a digest of the objects present and their count
//! ([`ferrotx_store::Partition::digest`]). Copies of one partition that hold the same
//! objects at the same versions have equal digests, whichever node holds them; the Redis
//! front end answers `FERROTX COPIES` with this, so that a test (or an operator) can
//! check, once a cluster is quiet, that every copy equals its primary.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use ferrotx_store::{StoreError, TableId, TableSpec};
use ferrotx_txn::participant::{NodeStore, Role};

/// What a node is for a partition copy it holds, in its current view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyRole {
    /// Its primary.
    Primary,
    /// One of its backups.
    Backup,
    /// A new backup being filled from the primary (data recovery): it holds only part of
    /// the partition until the copy ends.
    Filling,
    /// A new backup copied whole, not yet counted: a later view moves it into the
    /// partition's copies.
    Filled,
}

impl CopyRole {
    /// Its name, in lower case: `primary`, `backup`, `filling` or `filled`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::Backup => "backup",
            Self::Filling => "filling",
            Self::Filled => "filled",
        }
    }
}

/// One table of one copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableDigest {
    /// The table.
    pub table: TableId,
    /// A sum of per-object hashes (key, version, value) of the objects present.
    pub digest: u64,
    /// The objects present (neither deleted nor never written).
    pub objects: usize,
}

/// One partition copy a node holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyDigest {
    /// The partition.
    pub partition: u32,
    /// The node's role for it.
    pub role: CopyRole,
    /// Each table of the schema, in schema order.
    pub tables: Vec<TableDigest>,
}

/// Every partition copy a node holds in one view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyDigests {
    /// The view (the last one the node's workers switched to; without membership, the
    /// configuration's first view, whose id is the configuration's).
    pub view: u64,
    /// The copies, by partition.
    pub copies: Vec<CopyDigest>,
}

/// Why a node could not say what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CopiesError {
    /// The node has stopped: its copies are gone.
    #[error("node {0} has stopped")]
    Stopped(u16),
    /// A copy refused to be read (a table of the schema it does not have).
    #[error("partition {partition}: {source}")]
    Store {
        /// The partition.
        partition: u32,
        /// What the store said.
        source: StoreError,
    },
}

/// The node's store of the last view its workers switched to, with that view's id.
pub(crate) type ViewStore = Mutex<(u64, Arc<NodeStore>)>;

/// The digests of every copy `store` (the node's store in view `view`) hosts, for the
/// tables of `schema`. Walks every table of every copy: for checks, not the hot path.
pub fn copy_digests(
    view: u64,
    store: &NodeStore,
    schema: &[TableSpec],
) -> Result<CopyDigests, CopiesError> {
    let mut hosted: Vec<(u32, Role)> = store.hosted().collect();
    hosted.sort_unstable_by_key(|&(partition, _)| partition);
    let mut copies = Vec::with_capacity(hosted.len());
    for (partition, role) in hosted {
        let Some(copy) = store.get_any(partition) else {
            continue;
        };
        let fill = store.fills().iter().find(|f| f.partition() == partition);
        let role = match (role, fill) {
            (Role::Primary, _) => CopyRole::Primary,
            (Role::Backup, None) => CopyRole::Backup,
            (Role::Backup, Some(fill)) if fill.is_done() => CopyRole::Filled,
            (Role::Backup, Some(_)) => CopyRole::Filling,
        };
        let tables = schema
            .iter()
            .map(|spec| {
                let (digest, objects) = copy
                    .digest(spec.id)
                    .map_err(|source| CopiesError::Store { partition, source })?;
                Ok(TableDigest {
                    table: spec.id,
                    digest,
                    objects,
                })
            })
            .collect::<Result<_, _>>()?;
        copies.push(CopyDigest {
            partition,
            role,
            tables,
        });
    }
    Ok(CopyDigests { view, copies })
}

/// [`copy_digests`] of the store `view_store` holds, if the node still runs.
pub(crate) fn digests_of_view_store(
    node: u16,
    view_store: &Weak<ViewStore>,
    schema: &[TableSpec],
) -> Result<CopyDigests, CopiesError> {
    let (view, store) = {
        let view_store = view_store.upgrade().ok_or(CopiesError::Stopped(node))?;
        // A panicking worker cannot leave a view id and its store half written.
        let current = view_store.lock().unwrap_or_else(PoisonError::into_inner);
        current.clone()
    };
    copy_digests(view, &store, schema)
}

#[cfg(test)]
mod tests {
    use ferrotx_store::{Key, Partition, PartitionId};
    use ferrotx_txn::refill::Fill;

    use super::*;

    const ACCOUNTS: TableId = TableId(1);

    fn schema() -> Vec<TableSpec> {
        vec![
            TableSpec::fixed(1, "accounts", 8),
            TableSpec::variable(2, "blobs", 64),
        ]
    }

    fn partition(id: u32, keys: u64) -> Arc<Partition> {
        let partition = Arc::new(Partition::new(PartitionId(id), &schema()));
        for i in 0..keys {
            partition
                .load(ACCOUNTS, Key::from(i), &i.to_le_bytes())
                .unwrap();
        }
        partition
    }

    #[test]
    fn each_copy_with_its_role_and_a_digest_per_table() {
        let mut store = NodeStore::new();
        store.host(Role::Backup, partition(4, 3));
        store.host(Role::Primary, partition(1, 5));
        store.host_filling(partition(2, 1), Arc::new(Fill::new(2)));
        let report = copy_digests(9, &store, &schema()).unwrap();
        assert_eq!(report.view, 9);
        let summary: Vec<(u32, &str, Vec<usize>)> = report
            .copies
            .iter()
            .map(|c| {
                let objects = c.tables.iter().map(|t| t.objects).collect();
                (c.partition, c.role.name(), objects)
            })
            .collect();
        assert_eq!(
            summary,
            [
                (1, "primary", vec![5, 0]),
                (2, "filling", vec![1, 0]),
                (4, "backup", vec![3, 0]),
            ]
        );
        // The same objects on another node: the same digests, whatever the role.
        let mut other = NodeStore::new();
        other.host(Role::Primary, partition(4, 3));
        let again = copy_digests(9, &other, &schema()).unwrap();
        assert_eq!(again.copies[0].tables, report.copies[2].tables);
        // One object fewer: another digest.
        let mut short = NodeStore::new();
        short.host(Role::Backup, partition(4, 2));
        let short = copy_digests(9, &short, &schema()).unwrap();
        assert_ne!(
            short.copies[0].tables[0].digest,
            again.copies[0].tables[0].digest
        );
        assert_eq!(short.copies[0].tables[1], again.copies[0].tables[1]);
    }

    #[test]
    fn a_table_a_copy_lacks_is_an_error() {
        let mut store = NodeStore::new();
        store.host(Role::Primary, partition(0, 1));
        let mut wider = schema();
        wider.push(TableSpec::fixed(7, "other", 8));
        assert_eq!(
            copy_digests(1, &store, &wider),
            Err(CopiesError::Store {
                partition: 0,
                source: StoreError::UnknownTable(TableId(7)),
            })
        );
    }
}
