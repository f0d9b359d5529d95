//! Pages `web_fetch` fetched, kept for a while per URL ([`PageCache`]): the
//! daemon keeps one for the process, so runs share it. A page younger than
//! the freshness period is answered from memory; an older one with an `ETag`
//! is revalidated (`If-None-Match`, a 304 keeps it). The cache is bounded in
//! entries and in bytes, the oldest going first.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Most pages kept.
const MAX_ENTRIES: usize = 64;

/// Most bytes of Markdown kept, all pages together (32 MiB).
const MAX_BYTES: usize = 32 * 1024 * 1024;

/// A page as `web_fetch` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Page {
    /// Where it was fetched from, after redirects.
    pub(crate) final_url: String,
    /// Its title.
    pub(crate) title: Option<String>,
    /// Its text as Markdown.
    pub(crate) markdown: String,
    /// What the result says about how it was fetched (plain http, …).
    pub(crate) notes: Vec<String>,
    /// Hosts other than the requested URL's that the fetch went through
    /// (redirects, a Markdown alternate): checked again before reuse.
    pub(crate) other_hosts: Vec<String>,
    /// The validator to revalidate with, when the server gave one and the
    /// page came straight from the requested URL.
    pub(crate) etag: Option<String>,
}

#[derive(Debug)]
struct Entry {
    key: String,
    page: Arc<Page>,
    checked_at: Instant,
}

/// What the cache has for a URL.
#[derive(Debug, Clone)]
pub(crate) enum Lookup {
    /// Nothing.
    Miss,
    /// A page young enough to answer with.
    Fresh(Arc<Page>),
    /// A page older than the freshness period that can be revalidated.
    Stale(Arc<Page>),
}

/// Fetched pages by URL, shared by every run of the process.
#[derive(Debug)]
pub struct PageCache {
    fresh_for: Duration,
    entries: Mutex<VecDeque<Entry>>,
}

impl Default for PageCache {
    fn default() -> Self {
        Self::new(Duration::from_secs(15 * 60))
    }
}

impl PageCache {
    /// A cache whose pages are fresh for `fresh_for`.
    pub fn new(fresh_for: Duration) -> Self {
        Self {
            fresh_for,
            entries: Mutex::new(VecDeque::new()),
        }
    }

    /// What is kept for `key` at `now`.
    pub(crate) fn get(&self, key: &str, now: Instant) -> Lookup {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = entries.iter().find(|entry| entry.key == key) else {
            return Lookup::Miss;
        };
        if now.saturating_duration_since(entry.checked_at) < self.fresh_for {
            Lookup::Fresh(entry.page.clone())
        } else if entry.page.etag.is_some() {
            Lookup::Stale(entry.page.clone())
        } else {
            Lookup::Miss
        }
    }

    /// Keeps `page` for `key` as checked at `now`, dropping the oldest pages
    /// beyond the bounds. A page larger than the whole cache is not kept.
    pub(crate) fn put(&self, key: &str, page: Arc<Page>, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|entry| entry.key != key);
        if page.markdown.len() > MAX_BYTES {
            return;
        }
        entries.push_back(Entry {
            key: key.to_owned(),
            page,
            checked_at: now,
        });
        let mut bytes: usize = entries.iter().map(|entry| entry.page.markdown.len()).sum();
        while entries.len() > MAX_ENTRIES || bytes > MAX_BYTES {
            match entries.pop_front() {
                Some(oldest) => bytes -= oldest.page.markdown.len(),
                None => break,
            }
        }
    }

    /// Forgets `key` (a page whose hosts are no longer allowed).
    pub(crate) fn remove(&self, key: &str) {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|entry| entry.key != key);
    }

    /// Pages kept.
    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// True when no page is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(text: &str, etag: Option<&str>) -> Arc<Page> {
        Arc::new(Page {
            final_url: "https://a/".into(),
            title: None,
            markdown: text.into(),
            notes: Vec::new(),
            other_hosts: Vec::new(),
            etag: etag.map(str::to_owned),
        })
    }

    #[test]
    fn fresh_then_stale_with_an_etag_else_gone() {
        let cache = PageCache::new(Duration::from_secs(60));
        let t0 = Instant::now();
        cache.put("a", page("x", Some("\"1\"")), t0);
        cache.put("b", page("y", None), t0);
        assert!(matches!(cache.get("a", t0), Lookup::Fresh(_)));
        let later = t0 + Duration::from_secs(61);
        assert!(matches!(cache.get("a", later), Lookup::Stale(_)));
        assert!(matches!(cache.get("b", later), Lookup::Miss));
        assert!(matches!(cache.get("c", t0), Lookup::Miss));
        cache.remove("a");
        assert!(matches!(cache.get("a", t0), Lookup::Miss));
    }

    #[test]
    fn bounded_in_entries_and_bytes_oldest_first() {
        let cache = PageCache::new(Duration::from_secs(60));
        let now = Instant::now();
        for i in 0..(MAX_ENTRIES + 5) {
            cache.put(&i.to_string(), page("x", None), now);
        }
        assert_eq!(cache.len(), MAX_ENTRIES);
        assert!(matches!(cache.get("0", now), Lookup::Miss));
        let big = "x".repeat(MAX_BYTES / 2 + 1);
        cache.put("big1", page(&big, None), now);
        cache.put("big2", page(&big, None), now);
        assert!(matches!(cache.get("big1", now), Lookup::Miss));
        assert!(matches!(cache.get("big2", now), Lookup::Fresh(_)));
        cache.put("huge", page(&"x".repeat(MAX_BYTES + 1), None), now);
        assert!(matches!(cache.get("huge", now), Lookup::Miss));
    }
}
