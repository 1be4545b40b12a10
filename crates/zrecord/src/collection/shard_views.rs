//! A collection's views of its open shards, kept from batch to batch
//! (`ops/gather.rs`, [`StoreView`]).
//!
//! A batch over many shards that looked up, in each shard's store, its
//! files' change state, its length and its first chunk spent more time on
//! those lookups than on copying small records: each is a chain of cache
//! misses into another store. The collection instead keeps one array of
//! views of its open shards, made when their files last passed the checks
//! a batch makes and each still held the records the collection counted
//! ([`ShardViews::remake`]). Every open shard's store is in the
//! collection's [`ChangeGroup`], whose count rises with any change the
//! process's watches see in their files (`files/change_watch.rs`): a batch
//! that finds the count where it was when the views were made reads through
//! them without a look at any store, and otherwise has them remade first.
//!
//! A shard whose files are not watched, or whose check failed, gets no view;
//! a batch that reads it takes the path of a store's own reads, which checks
//! its files every time and reports what is wrong.

use std::sync::Arc;

use crate::files::change_watch::{ChangeGroup, Polled};
use crate::ops::gather::StoreView;
use crate::store::Store;

/// In [`ShardViews::places`]: the shard has no view.
pub(super) const NO_VIEW: u32 = u32::MAX;

pub(super) struct ShardViews {
    group: Arc<ChangeGroup>,
    /// The group's count when the views were made; `None` before.
    made_at: Option<u64>,
    /// The views, in the order of their shards. Each borrows from the
    /// store beside it in `stores`, which is held as long as the view is
    /// kept.
    views: Vec<StoreView<'static>>,
    stores: Vec<Arc<Store>>,
    /// The shard each view is of.
    shards: Vec<usize>,
    /// Per shard of the collection, the place of its view in `views`, or
    /// [`NO_VIEW`].
    places: Vec<u32>,
}

impl ShardViews {
    /// No views yet, of a collection of `shards` shards.
    pub(super) fn new(shards: usize) -> ShardViews {
        ShardViews {
            group: ChangeGroup::new(),
            made_at: None,
            views: Vec::new(),
            stores: Vec::new(),
            shards: Vec::new(),
            places: vec![NO_VIEW; shards],
        }
    }

    /// The group every open shard's store must join when it opens.
    pub(super) fn group(&self) -> &Arc<ChangeGroup> {
        &self.group
    }

    /// Whether the views may be read as they are, as of `polled`: `Some(true)`
    /// when no change was seen since they were made, `Some(false)` when they
    /// must be remade first, `None` when the shards' changes reach this
    /// process from no watcher (none, or a forked child's): views are then
    /// never read.
    pub(super) fn current(&self, polled: &Polled) -> Option<bool> {
        let count = self.group.count(polled)?;
        Some(self.made_at == Some(count))
    }

    /// Makes the views anew, of the open shards `open` (shard, store) whose
    /// files pass [`Store::check_files`] as of `polled`, are watched, and
    /// hold at least `expected(shard)` records.
    pub(super) fn remake<'s>(
        &mut self,
        polled: &Polled,
        open: impl Iterator<Item = (usize, &'s Arc<Store>)>,
        expected: impl Fn(usize) -> u64,
    ) {
        // Read before the checks: a change during them raises the count past
        // it, and the next batch makes the views again.
        let count = self.group.count(polled);
        self.clear();
        self.made_at = count;
        if count.is_none() {
            return;
        }
        for (shard, store) in open {
            let checked = matches!(store.check_files(polled), Ok(false));
            if !checked || (store.len() as u64) < expected(shard) {
                continue;
            }
            // SAFETY: the view borrows from `**store` alone, which stays where
            // it is while `self.stores` holds this Arc: the view and the Arc
            // are pushed and removed together (`clear`), and a view is only
            // handed out borrowed from `self` (`views`).
            let view =
                unsafe { std::mem::transmute::<StoreView<'_>, StoreView<'static>>(store.view()) };
            self.places[shard] = self.views.len() as u32;
            self.views.push(view);
            self.stores.push(store.clone());
            self.shards.push(shard);
        }
    }

    /// Drops every view, and the stores they hold: when the collection lets
    /// a store go, and before the views are made anew. Views are made again
    /// before a batch reads them (a store is let go when another opens, and
    /// joins the group).
    pub(super) fn clear(&mut self) {
        for &shard in &self.shards {
            self.places[shard] = NO_VIEW;
        }
        self.views.clear();
        self.stores.clear();
        self.shards.clear();
        self.made_at = None;
    }

    /// The views, each store's once.
    pub(super) fn views(&self) -> &[StoreView<'_>] {
        &self.views
    }

    /// The place in [`ShardViews::views`] of `shard`'s view, if it has one.
    pub(super) fn place(&self, shard: usize) -> Option<u32> {
        let place = self.place_or_none(shard);
        (place != NO_VIEW).then_some(place)
    }

    /// [`ShardViews::place`], [`NO_VIEW`] for a shard with no view.
    pub(super) fn place_or_none(&self, shard: usize) -> u32 {
        self.places[shard]
    }
}
