//! Support for the whole-runtime benchmarks in `tests/benches/` (SPEC §14):
//! bench-only tools, summary statistics, request arrival times at the scripted
//! server, a bare HTTP client and replays that split a run's time into parts,
//! the measured multi-turn run shared by the per-turn benches, a loopback OTLP
//! collector and a span sink for runs with telemetry on, a relay that counts
//! connections, readings of `/proc`, the scripted server in a child
//! process, and the agent environment for a scripted server that runs in
//! another process.
//!
//! Nothing here asserts a timing: benchmarks print figures, which are recorded
//! in `docs/performance.md`. This module must not change how the product
//! behaves; it only drives and observes it.

pub mod arrivals;
pub mod collector;
pub mod http;
pub mod proxy;
pub mod replay;
pub mod server_child;
pub mod spans;
pub mod stats;
pub mod system;
pub mod tools;
pub mod turns;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use troupe_actors::AgentEnv;
use troupe_config::{DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_TOKENS, ResolvedProvider};
use troupe_llm::{Provider, anthropic};
use troupe_paths::sandbox::PathSandbox;
use troupe_protocol::model::Protocol;
use troupe_protocol::model::SystemPrompt;
use troupe_store::Store;
use troupe_tools::ToolRegistry;

use crate::{TEST_ENVIRONMENT, TEST_STABLE_PROMPT};

/// Argument cargo passes to a `harness = false` bench target under
/// `cargo bench` (and not under `cargo test --benches`).
pub const CARGO_BENCH_FLAG: &str = "--bench";

/// Per-call timeout of the agent environment: SPEC §3's default.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(30);

/// Idle timeout of the benchmark provider's streams.
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// True when the benchmark binary was started by `cargo bench` (or by hand
/// with `--bench`). Under `cargo test --benches` it is not, and benchmarks
/// return at once, so no timing ever runs as a test.
pub fn invoked_as_benchmark() -> bool {
    std::env::args().any(|arg| arg == CARGO_BENCH_FLAG)
}

/// Runs `task` on a worker thread of a new multi-threaded tokio runtime
/// (where the product's own tasks run, rather than on the thread that blocks
/// on it) and returns its result.
pub fn run_on_tokio_workers<T, F>(task: F) -> Result<T, String>
where
    T: Send + 'static,
    F: Future<Output = Result<T, String>> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|err| format!("cannot start tokio: {err}"))?;
    runtime.block_on(async move {
        tokio::spawn(task)
            .await
            .map_err(|err| format!("the benchmark task failed: {err}"))?
    })
}

/// A positive count from the environment variable `name`, or `default` when it
/// is unset. A set but invalid value is an error naming the variable.
pub fn count_from_env(name: &str, default: usize) -> Result<usize, String> {
    parse_count(name, std::env::var(name).ok().as_deref(), default)
}

/// The rule of [`count_from_env`], on the variable's value.
pub fn parse_count(name: &str, value: Option<&str>, default: usize) -> Result<usize, String> {
    match value {
        None => Ok(default),
        Some(text) => match text.trim().parse::<usize>() {
            Ok(count) if count > 0 => Ok(count),
            _ => Err(format!("{name} must be a positive integer, got {text:?}")),
        },
    }
}

/// The order in which to run `items` in round `round` of an alternating
/// benchmark: rotated by one place every two rounds and reversed in odd
/// rounds, so that over the rounds no item is always first or always last
/// (with two items: A B, B A, B A, A B, …).
pub fn round_order<T: Clone>(items: &[T], round: usize) -> Vec<T> {
    let mut order = items.to_vec();
    if !order.is_empty() {
        let shift = (round / 2) % order.len();
        order.rotate_left(shift);
    }
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

/// The Anthropic adapter pointed at a scripted server at `base_url`, with no
/// retries (a benchmark run that needs one is broken).
pub fn scripted_provider(base_url: &str) -> Result<Arc<dyn Provider>, String> {
    let resolved = ResolvedProvider {
        name: "scripted".into(),
        protocol: Protocol::Anthropic,
        model: "scripted-model".into(),
        base_url: base_url.to_string(),
        api_key: Some("bench-key".into()),
        api_key_env: "BENCH_KEY".into(),
        context_window: DEFAULT_CONTEXT_WINDOW,
        max_tokens: DEFAULT_MAX_TOKENS,
        thinking_budget: None,
        price: None,
        idle_timeout: STREAM_IDLE_TIMEOUT,
        max_retries: 0,
        store: false,
    };
    let provider = anthropic::AnthropicProvider::new(&resolved).map_err(|err| err.to_string())?;
    Ok(Arc::new(provider))
}

/// An agent environment like the end-to-end harness's: `provider`, `registry`,
/// the project at `project`, spill files under `data`.
pub fn agent_env(
    provider: Arc<dyn Provider>,
    registry: ToolRegistry,
    project: &Path,
    data: &Path,
    store: Store,
) -> Result<Arc<AgentEnv>, String> {
    let spill_dir = data.join("spill");
    let sandbox = PathSandbox::new(project, std::slice::from_ref(&spill_dir), None)
        .map_err(|err| format!("sandbox: {err}"))?;
    Ok(Arc::new(
        AgentEnv::builder(provider, store, Arc::new(sandbox), spill_dir)
            .registry(registry)
            .system(SystemPrompt {
                stable: TEST_STABLE_PROMPT.into(),
                environment: TEST_ENVIRONMENT.into(),
            })
            .child_env(vec![("PATH".into(), "/usr/bin:/bin".into())])
            .tool_timeout(TOOL_TIMEOUT)
            .build(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_default_parse_and_refuse_nonsense() {
        assert_eq!(parse_count("N", None, 7), Ok(7));
        assert_eq!(parse_count("N", Some(" 12 "), 7), Ok(12));
        assert!(
            parse_count("N", Some("0"), 7)
                .unwrap_err()
                .contains("N must be")
        );
        assert!(parse_count("N", Some("many"), 7).is_err());
    }

    #[test]
    fn round_orders_rotate_and_reverse() {
        let items = ['a', 'b', 'c'];
        let orders: Vec<String> = (0..6)
            .map(|round| round_order(&items, round).into_iter().collect())
            .collect();
        assert_eq!(orders, ["abc", "cba", "bca", "acb", "cab", "bac"]);
        let firsts: Vec<char> = orders.iter().filter_map(|o| o.chars().next()).collect();
        for item in items {
            assert_eq!(firsts.iter().filter(|c| **c == item).count(), 2);
        }
        assert_eq!(round_order(&['x', 'y'], 1), ['y', 'x']);
        assert!(round_order::<char>(&[], 3).is_empty());
    }

    #[test]
    fn tasks_run_on_workers_and_pass_results_and_errors_back() {
        let on_worker =
            run_on_tokio_workers(async { Ok(std::thread::current().name().map(str::to_string)) })
                .unwrap();
        assert_ne!(on_worker, std::thread::current().name().map(str::to_string));
        assert_eq!(
            run_on_tokio_workers(async { Err::<(), _>("no".to_string()) }),
            Err("no".to_string())
        );
    }

    #[tokio::test]
    async fn environment_for_a_remote_scripted_server() {
        let project = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let provider = scripted_provider("http://127.0.0.1:9").unwrap();
        let store = Store::open(data.path()).unwrap();
        let env = agent_env(
            provider,
            troupe_tools::builtin_registry(),
            project.path(),
            data.path(),
            store,
        )
        .unwrap();
        assert_eq!(env.provider().model(), "scripted-model");
        assert!(env.registry().contains("read_file"));
        assert_eq!(env.tool_timeout(), TOOL_TIMEOUT);
    }
}
