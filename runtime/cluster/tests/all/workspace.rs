//! A run's workspace checked out from a local bare repository over
//! `file://`: exactly the revision asked for, a cache reused for the next
//! run, hostile URLs and revisions refused before anything is written, and
//! a repository larger than the limit or a checkout past its time stopped.

use troupe_cluster::workspace::{WorkspaceError, WorkspaceLimits, check_out};
use troupe_test_support::git::two_commit_repository;

#[tokio::test]
async fn a_checkout_holds_exactly_the_revision_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let (url, first) = two_commit_repository(dir.path());
    let root = dir.path().join("home/workspaces");
    let limits = WorkspaceLimits::default();
    for (run, revision, content) in [
        ("run-1", first.as_str(), "first\n"),
        ("run-2", "main", "second\n"),
        ("run-3", "v1", "first\n"),
    ] {
        let checkout = check_out(&root, &url, revision, run, true, limits)
            .await
            .unwrap();
        assert_eq!(checkout, root.join("runs").join(run));
        assert_eq!(
            std::fs::read_to_string(checkout.join("notes.txt")).unwrap(),
            content,
            "{revision}"
        );
    }
    // The checkouts' origin is the repository, not the cache.
    let config = std::fs::read_to_string(root.join("runs/run-1/.git/config")).unwrap();
    assert!(config.contains(&format!("url = {url}")), "{config}");
    // One cache for the three runs.
    assert_eq!(std::fs::read_dir(root.join("cache")).unwrap().count(), 1);
    // A revision the repository does not have.
    let err = check_out(&root, &url, "no-such-branch", "run-4", true, limits)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("has no revision no-such-branch"),
        "{err}"
    );
    assert!(!root.join("runs/run-4").exists());
}

#[tokio::test]
async fn hostile_urls_and_revisions_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = two_commit_repository(dir.path());
    let root = dir.path().join("home/workspaces");
    let marker = dir.path().join("pwned");
    let limits = WorkspaceLimits::default();
    for (url, revision, allow_file) in [
        (
            format!("ext::sh -c touch% {}", marker.display()),
            "main",
            true,
        ),
        ("ext::sh".to_string(), "main", true),
        (url.clone(), "main", false),
        ("--upload-pack=touch /tmp/x".to_string(), "main", true),
        (url.clone(), "--output=/tmp/x", true),
        (url.clone(), "main..v1", true),
    ] {
        let err = check_out(&root, &url, revision, "run-1", allow_file, limits)
            .await
            .unwrap_err();
        assert!(matches!(err, WorkspaceError::Refused(_)), "{url}: {err}");
        assert!(err.to_string().contains("refused"), "{err}");
    }
    assert!(!root.exists(), "nothing written");
    assert!(!marker.exists());
}

#[tokio::test]
async fn a_repository_larger_than_the_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = two_commit_repository(dir.path());
    let root = dir.path().join("workspaces");
    let limits = WorkspaceLimits {
        max_bytes: 1,
        ..WorkspaceLimits::default()
    };
    let err = check_out(&root, &url, "main", "run-1", true, limits)
        .await
        .unwrap_err();
    assert!(matches!(err, WorkspaceError::TooLarge(1)), "{err}");
    assert!(!root.join("runs/run-1").exists());
}

#[tokio::test]
async fn a_checkout_past_its_time_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = two_commit_repository(dir.path());
    let root = dir.path().join("workspaces");
    let limits = WorkspaceLimits {
        time: std::time::Duration::ZERO,
        ..WorkspaceLimits::default()
    };
    let err = check_out(&root, &url, "main", "run-1", true, limits)
        .await
        .unwrap_err();
    assert!(matches!(err, WorkspaceError::TimedOut(_)), "{err}");
    assert!(!root.join("runs/run-1").exists());
}
