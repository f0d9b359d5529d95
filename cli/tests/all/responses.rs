//! A run configured with `protocol = "openai-responses"` end to end: the real
//! `troupe` binary against the scripted server's `POST /v1/responses`, with
//! two read-only calls in one response carried back statelessly.

use serde_json::{Value, json};
use troupe_protocol::model::Protocol;
use troupe_scripted::{Script, ScriptedServer, text, tool_calls};

use crate::support::{Env, describe, json_lines, run, session_of};

/// The items of `kind` in a request's `input`.
fn items<'a>(input: &'a [Value], kind: &str) -> Vec<&'a Value> {
    input.iter().filter(|item| item["type"] == kind).collect()
}

#[tokio::test]
async fn a_responses_run_carries_two_calls_and_their_outputs_back_statelessly() {
    let env = Env::with_protocol(Protocol::OpenAiResponses);
    std::fs::write(env.root().join("alpha.txt"), "first file\n").unwrap();
    std::fs::write(env.root().join("beta.txt"), "second file\n").unwrap();
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_calls([
                ("read_file", json!({"path": "alpha.txt"})),
                ("read_file", json!({"path": "beta.txt"})),
            ]))
            .then(text("Both files are short.")),
    )
    .await
    .unwrap();
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "Read alpha.txt and beta.txt."]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let events = json_lines(&output.stdout);
    let session = session_of(&events);
    let finished = events.last().unwrap();
    assert_eq!(finished["type"], "run_finished", "{finished}");
    assert_eq!(
        finished["final_text"], "Both files are short.",
        "{finished}"
    );

    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.path, "/v1/responses");
        assert_eq!(request.body["store"], false);
        assert_eq!(
            request.body["prompt_cache_key"].as_str(),
            Some(session.as_str())
        );
        assert!(request.body.get("previous_response_id").is_none());
    }
    let input = requests[1].body["input"].as_array().unwrap();
    let calls = items(input, "function_call");
    let outputs = items(input, "function_call_output");
    assert_eq!(calls.len(), 2, "{input:#?}");
    assert_eq!(outputs.len(), 2, "{input:#?}");
    for (call, path, text) in [
        (calls[0], "alpha.txt", "first file"),
        (calls[1], "beta.txt", "second file"),
    ] {
        assert_eq!(call["name"], "read_file");
        let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(arguments["path"], path);
        let answer = outputs
            .iter()
            .find(|output| output["call_id"] == call["call_id"])
            .unwrap_or_else(|| panic!("no output for {call}"));
        assert!(
            answer["output"].as_str().unwrap().contains(text),
            "{answer}"
        );
    }
    // The history opens with the task, and the calls come before their outputs.
    assert_eq!(input[0]["role"], "user");
    let position = |item: &Value| input.iter().position(|i| i == item).unwrap();
    assert!(position(calls[1]) < position(outputs[0]));
}
