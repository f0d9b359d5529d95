//! Which provider key variables a configuration names (SPEC §5, §15): what
//! no command and no MCP server is ever given. The names themselves and the
//! withholding at start-up are `secrets`' own; this module reads them out of
//! configuration files.

use std::collections::BTreeSet;
use std::path::Path;

use super::{Config, ConfigFile};
use troupe_process::secrets::{key_names, parse_withhold_list, withheld_names};

/// The key variables of a merged configuration: [`key_names`] of every
/// `api_key_env` its provider entries name, plus every name withheld at
/// start-up. What no command and no MCP server is ever given.
pub fn config_key_names(config: &Config) -> BTreeSet<String> {
    let started = withheld_names();
    key_names(
        config
            .providers
            .values()
            .filter_map(|provider| provider.api_key_env.as_deref())
            .chain(started.iter().map(String::as_str)),
    )
}

/// Every `api_key_env` named by the provider entries of `files`.
pub(crate) fn configured_key_vars<'a>(
    files: impl IntoIterator<Item = &'a ConfigFile>,
) -> Vec<String> {
    files
        .into_iter()
        .flat_map(|file| file.providers.values())
        .filter_map(|provider| provider.api_key_env.clone())
        .collect()
}

/// The key variables named by the user configuration file and the project
/// configuration files of `project_roots`, read leniently: a file that is
/// missing or does not parse names nothing here (loading it later reports
/// the error).
pub fn key_names_from_files(
    user_file: Option<&Path>,
    project_roots: &[&Path],
    parent_list: Option<&str>,
) -> BTreeSet<String> {
    let mut files = Vec::new();
    let project_files = project_roots
        .iter()
        .map(|root| crate::paths::project_config_file(root));
    for path in user_file
        .map(Path::to_path_buf)
        .into_iter()
        .chain(project_files)
    {
        if let Ok(text) = std::fs::read_to_string(&path)
            && let Ok(file) = crate::parse_config_file(&path, &text)
        {
            files.push(file);
        }
    }
    let configured = configured_key_vars(&files);
    let listed = parent_list.map(parse_withhold_list).unwrap_or_default();
    key_names(
        configured
            .iter()
            .map(String::as_str)
            .chain(listed.iter().copied()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_process::secrets::is_key_name;

    #[test]
    fn key_names_match_in_any_case_and_come_from_the_configuration() {
        let mut config = Config::default();
        config.providers.insert(
            "mine".into(),
            crate::ProviderFile {
                api_key_env: Some("MY_LLM_KEY".into()),
                ..Default::default()
            },
        );
        let keys = config_key_names(&config);
        for name in [
            "ANTHROPIC_API_KEY",
            "anthropic_api_key",
            "Openai_Api_Key",
            "ANTHROPIC_AUTH_TOKEN",
            "MY_LLM_KEY",
            "my_llm_key",
        ] {
            assert!(is_key_name(&keys, name), "{name}");
        }
        for name in ["GITHUB_TOKEN", "ANTHROPIC_API_KEY_2", "", "ANTHROPIC"] {
            assert!(!is_key_name(&keys, name), "{name}");
        }
    }

    #[test]
    fn configured_names_come_from_every_provider_entry() {
        let user = crate::parse_config_file(
            Path::new("/u"),
            "[providers.a]\napi_key_env = \"A_KEY\"\n[providers.b]\nmodel = \"m\"\n",
        )
        .unwrap();
        let project =
            crate::parse_config_file(Path::new("/p"), "[providers.c]\napi_key_env = \"C_KEY\"\n")
                .unwrap();
        assert_eq!(
            configured_key_vars([&user, &project]),
            vec!["A_KEY", "C_KEY"]
        );
    }

    #[test]
    fn names_from_files_read_user_and_project_files_leniently() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user.toml");
        std::fs::write(&user, "[providers.x]\napi_key_env = \"USER_KEY\"\n").unwrap();
        let project = dir.path().join("proj");
        std::fs::create_dir_all(project.join(".troupe")).unwrap();
        std::fs::write(
            project.join(".troupe/config.toml"),
            "[providers.y]\napi_key_env = \"PROJECT_KEY\"\n",
        )
        .unwrap();
        let broken = dir.path().join("broken");
        std::fs::create_dir_all(broken.join(".troupe")).unwrap();
        std::fs::write(broken.join(".troupe/config.toml"), "not toml [").unwrap();
        let names = key_names_from_files(
            Some(&user),
            &[&project, &broken, Path::new("/nonexistent")],
            Some("PARENT_KEY"),
        );
        for name in ["USER_KEY", "PROJECT_KEY", "PARENT_KEY", "ANTHROPIC_API_KEY"] {
            assert!(names.contains(name), "{name} in {names:?}");
        }
    }
}
