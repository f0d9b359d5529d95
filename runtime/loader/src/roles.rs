//! Finding and reading role files (`<user config dir>/agents/NAME.md`,
//! `<project>/.troupe/agents/NAME.md`) for `troupe_agent::roles`, which
//! parses and merges them.
//!
//! Role files come from cloned repositories, so reading treats them as
//! hostile input: at most [`MAX_ROLE_FILES_PER_DIR`] files of at most
//! [`MAX_ROLE_FILE_BYTES`] each, symlinks may not leave their root (the user
//! configuration directory or the project root), only regular UTF-8 files are
//! read, and a broken file is skipped with a [`RoleWarning`] instead of
//! failing the load. Nothing here writes or consults the environment: callers
//! pass the directories.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::path::Path;

use troupe_agent::roles::{
    AGENTS_DIR_NAME, MAX_ROLE_FILE_BYTES, MAX_ROLE_FILES_PER_DIR, ROLE_FILE_EXTENSION, Role,
    RoleSet, RoleSource, RoleWarning, parse_role,
};
use troupe_paths::PROJECT_DIR_NAME;

/// The built-ins plus the role files of the user config directory (when
/// given) and of `<project_root>/.troupe/agents/` (when given: `None` leaves
/// the project's role files out, as for a project that is not trusted). A
/// project role replaces a user role of the same name whole; a file role
/// named like a built-in replaces it in its position. Broken files are
/// skipped and reported; a missing directory is not reported.
pub fn load_roles(
    user_config_dir: Option<&Path>,
    project_root: Option<&Path>,
) -> (RoleSet, Vec<RoleWarning>) {
    let mut warnings = Vec::new();
    let mut files = BTreeMap::new();
    if let Some(dir) = user_config_dir {
        let agents = dir.join(AGENTS_DIR_NAME);
        files.extend(load_dir(&agents, dir, Origin::User, &mut warnings));
    }
    if let Some(project_root) = project_root {
        files.extend(project_roles(project_root, &mut warnings));
    }
    let set = RoleSet::with_file_roles(files);
    tracing::debug!(
        roles = set.len(),
        warnings = warnings.len(),
        "sub-agent roles loaded"
    );
    (set, warnings)
}

/// The names of the roles `<project_root>/.troupe/agents/` defines (the files
/// that load), sorted: what a project that is not trusted leaves out.
pub fn project_role_names(project_root: &Path) -> Vec<String> {
    project_roles(project_root, &mut Vec::new())
        .into_keys()
        .collect()
}

/// Which directory a role file came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    User,
    Project,
}

impl Origin {
    fn source(self, path: &Path) -> RoleSource {
        match self {
            Self::User => RoleSource::User(path.to_path_buf()),
            Self::Project => RoleSource::Project(path.to_path_buf()),
        }
    }

    fn root_label(self) -> &'static str {
        match self {
            Self::User => "the user configuration directory",
            Self::Project => "the project root",
        }
    }
}

/// The role files of `<project_root>/.troupe/agents/`, keyed by role name.
fn project_roles(project_root: &Path, warnings: &mut Vec<RoleWarning>) -> BTreeMap<String, Role> {
    let agents = project_root.join(PROJECT_DIR_NAME).join(AGENTS_DIR_NAME);
    load_dir(&agents, project_root, Origin::Project, warnings)
}

/// Loads the role files of one directory, keyed by role name. `root` is the
/// directory nothing may resolve outside of.
fn load_dir(
    dir: &Path,
    root: &Path,
    origin: Origin,
    warnings: &mut Vec<RoleWarning>,
) -> BTreeMap<String, Role> {
    let mut roles = BTreeMap::new();
    match fs::symlink_metadata(dir) {
        Ok(_) => {}
        Err(e) if is_missing(&e) => return roles,
        Err(e) => {
            warnings.push(RoleWarning::new(
                dir,
                format!("cannot read the role directory ({e}); fix its permissions"),
            ));
            return roles;
        }
    }
    let (canonical_root, canonical_dir) = match (fs::canonicalize(root), fs::canonicalize(dir)) {
        (Ok(r), Ok(d)) => (r, d),
        (Err(e), _) | (_, Err(e)) => {
            warnings.push(RoleWarning::new(
                dir,
                format!("cannot resolve the role directory ({e}); skipped"),
            ));
            return roles;
        }
    };
    if !canonical_dir.starts_with(&canonical_root) {
        warnings.push(RoleWarning::new(
            dir,
            format!(
                "resolves to {}, outside {} ({}); skipped: make it a real directory",
                canonical_dir.display(),
                origin.root_label(),
                canonical_root.display()
            ),
        ));
        return roles;
    }
    if !canonical_dir.is_dir() {
        warnings.push(RoleWarning::new(
            dir,
            "is not a directory; role files go in a directory of that name",
        ));
        return roles;
    }
    let entries = match fs::read_dir(&canonical_dir) {
        Ok(entries) => entries,
        Err(e) => {
            warnings.push(RoleWarning::new(
                dir,
                format!("cannot list the role directory ({e}); fix its permissions"),
            ));
            return roles;
        }
    };
    let mut names: Vec<std::ffi::OsString> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.file_name())
        .filter(|name| {
            Path::new(name)
                .extension()
                .is_some_and(|ext| ext == ROLE_FILE_EXTENSION)
        })
        .collect();
    names.sort();
    if names.len() > MAX_ROLE_FILES_PER_DIR {
        let ignored = &names[MAX_ROLE_FILES_PER_DIR..];
        warnings.push(RoleWarning::new(
            dir,
            format!(
                "{} role files ignored (from {}): at most {MAX_ROLE_FILES_PER_DIR} are read per \
                 directory, in file-name order; remove the ones you do not use",
                ignored.len(),
                Path::new(&ignored[0]).display()
            ),
        ));
        names.truncate(MAX_ROLE_FILES_PER_DIR);
    }
    for name in names {
        // Shown in warnings and sources; the file is read through the resolved
        // directory so a renamed ancestor cannot redirect the read.
        let path = dir.join(&name);
        let real = canonical_dir.join(&name);
        let text = match read_role_file(&real, &canonical_root, origin) {
            Ok(text) => text,
            Err(message) => {
                warnings.push(RoleWarning::new(&path, message));
                continue;
            }
        };
        let stem = Path::new(&name)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        match parse_role(&text, &stem, origin.source(&path)) {
            Ok(role) => {
                if let Some(first) = roles.get(&role.name) {
                    let first_path = match &first.source {
                        RoleSource::User(p) | RoleSource::Project(p) => p.display().to_string(),
                        RoleSource::Builtin => String::new(),
                    };
                    warnings.push(RoleWarning::new(
                        &path,
                        format!(
                            "role `{}` is already defined by {first_path}; skipped: give one of \
                             them another `name`",
                            role.name
                        ),
                    ));
                } else {
                    roles.insert(role.name.clone(), role);
                }
            }
            Err(message) => warnings.push(RoleWarning::new(&path, message)),
        }
    }
    roles
}

fn is_missing(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// Reads one candidate file: a regular file (or a symlink resolving to one
/// inside `canonical_root`) of at most [`MAX_ROLE_FILE_BYTES`], in UTF-8.
fn read_role_file(path: &Path, canonical_root: &Path, origin: Origin) -> Result<String, String> {
    let meta = fs::symlink_metadata(path).map_err(|e| format!("cannot read the file ({e})"))?;
    let target = if meta.file_type().is_symlink() {
        let target = fs::canonicalize(path)
            .map_err(|e| format!("is a symlink that cannot be resolved ({e}); fix or remove it"))?;
        if !target.starts_with(canonical_root) {
            return Err(format!(
                "is a symlink to {}, outside {} ({}); skipped: copy the file here instead",
                target.display(),
                origin.root_label(),
                canonical_root.display()
            ));
        }
        target
    } else {
        path.to_path_buf()
    };
    let meta = fs::metadata(&target).map_err(|e| format!("cannot read the file ({e})"))?;
    if !meta.is_file() {
        return Err("is not a regular file; a role is a Markdown file".into());
    }
    if meta.len() > MAX_ROLE_FILE_BYTES {
        return Err(too_large(meta.len()));
    }
    let file = fs::File::open(&target).map_err(|e| format!("cannot read the file ({e})"))?;
    let mut bytes = Vec::new();
    // One byte more than allowed tells a file that grew since `metadata`.
    file.take(MAX_ROLE_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the file ({e})"))?;
    if bytes.len() as u64 > MAX_ROLE_FILE_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "is not valid UTF-8 (at byte {}); save it as UTF-8",
            e.utf8_error().valid_up_to()
        )
    })
}

fn too_large(len: u64) -> String {
    format!(
        "is {len} bytes, more than the {} KiB a role file may have; shorten the prompt",
        MAX_ROLE_FILE_BYTES / 1024
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use troupe_agent::roles::RoleTools;

    const GOOD_YAML: &str = "---\ndescription: Reviews diffs\n---\nReview the diff.\n";

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        fs::create_dir_all(dir).unwrap();
        let path = dir.join(name);
        fs::write(&path, text).unwrap();
        path
    }

    fn project_agents(root: &Path) -> PathBuf {
        root.join(".troupe").join("agents")
    }

    fn warning_for<'a>(warnings: &'a [RoleWarning], file: &str) -> &'a RoleWarning {
        warnings
            .iter()
            .find(|w| w.path.file_name().is_some_and(|n| n == file))
            .unwrap_or_else(|| panic!("no warning for {file}: {warnings:#?}"))
    }

    #[test]
    fn load_merges_builtins_user_and_project() {
        let user = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let user_agents = user.path().join("agents");
        write(
            &user_agents,
            "shared.md",
            "---\ndescription: user one\nmodel: user-model\nmax_turns: 9\n---\nUser prompt",
        );
        write(&user_agents, "zeta.md", "---\ndescription: z\n---\nZ");
        write(
            &project_agents(project.path()),
            "shared.md",
            "---\ndescription: project one\n---\nProject prompt",
        );
        write(
            &project_agents(project.path()),
            "alpha.md",
            "---\ndescription: a\n---\nA",
        );
        write(&project_agents(project.path()), "notes.txt", "ignored");

        let (set, warnings) = load_roles(Some(user.path()), Some(project.path()));
        assert!(warnings.is_empty(), "{warnings:#?}");
        assert_eq!(
            set.names().collect::<Vec<_>>(),
            ["general", "explorer", "alpha", "shared", "zeta"]
        );
        let shared = set.get("shared").unwrap();
        // Replaced whole: nothing of the user role survives.
        assert_eq!(shared.description, "project one");
        assert_eq!(shared.prompt, "Project prompt");
        assert_eq!(shared.model, None);
        assert_eq!(shared.max_turns, None);
        assert_eq!(
            shared.source,
            RoleSource::Project(project_agents(project.path()).join("shared.md"))
        );
        assert_eq!(
            set.get("zeta").unwrap().source,
            RoleSource::User(user_agents.join("zeta.md"))
        );
    }

    #[test]
    fn a_file_role_replaces_a_builtin_in_place() {
        let project = tempfile::tempdir().unwrap();
        let agents = project_agents(project.path());
        write(
            &agents,
            "general.md",
            "---\ndescription: mine\ntools: read_file\n---\nMine",
        );
        write(&agents, "aaa.md", "---\ndescription: first by name\n---\nA");
        let (set, warnings) = load_roles(None, Some(project.path()));
        assert!(warnings.is_empty(), "{warnings:#?}");
        assert_eq!(
            set.names().collect::<Vec<_>>(),
            ["general", "explorer", "aaa"]
        );
        let general = set.get("general").unwrap();
        assert_eq!(general.description, "mine");
        assert_eq!(general.tools, RoleTools::Only(vec!["read_file".into()]));
        assert_eq!(set.iter().next(), Some(general));
    }

    #[test]
    fn without_the_project_its_role_files_are_left_out_and_named() {
        let user = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let agents = project_agents(project.path());
        write(
            &agents,
            "general.md",
            "---\ndescription: theirs\n---\nTheirs",
        );
        write(&agents, "zed.md", "---\ndescription: z\n---\nZ");
        write(&agents, "broken.md", "no front matter");
        write(
            &user.path().join("agents"),
            "mine.md",
            "---\ndescription: mine\n---\nMine",
        );
        let (set, warnings) = load_roles(Some(user.path()), None);
        assert!(warnings.is_empty(), "{warnings:#?}");
        assert_eq!(
            set.names().collect::<Vec<_>>(),
            ["general", "explorer", "mine"]
        );
        assert_eq!(set.get("general").unwrap().source, RoleSource::Builtin);
        assert_eq!(project_role_names(project.path()), ["general", "zed"]);
        assert!(project_role_names(user.path()).is_empty());
    }

    #[test]
    fn missing_directories_are_not_warnings() {
        let project = tempfile::tempdir().unwrap();
        let (set, warnings) =
            load_roles(Some(&project.path().join("nowhere")), Some(project.path()));
        assert!(warnings.is_empty(), "{warnings:#?}");
        assert_eq!(set, RoleSet::builtin());
    }

    #[test]
    fn broken_files_are_warnings_and_the_rest_load() {
        let project = tempfile::tempdir().unwrap();
        let agents = project_agents(project.path());
        write(&agents, "good.md", GOOD_YAML);
        write(&agents, "bad-yaml.md", "---\ndescription: [x\n---\nP");
        write(&agents, "bad-toml.md", "+++\ndescription = \n+++\nP");
        write(
            &agents,
            "unknown-key.md",
            "---\ndescription: d\ncolor: red\n---\nP",
        );
        write(
            &agents,
            "bad-value.md",
            "---\ndescription: d\nmax_turns: 0\n---\nP",
        );
        write(&agents, "empty-body.md", "---\ndescription: d\n---\n\n");
        write(&agents, "Bad Name.md", GOOD_YAML);
        write(
            &agents,
            "long-description.md",
            &format!("---\ndescription: {}\n---\nP", "x".repeat(600)),
        );
        fs::write(
            agents.join("latin1.md"),
            b"---\ndescription: caf\xe9\n---\nP",
        )
        .unwrap();
        write(
            &agents,
            "huge.md",
            &format!("---\ndescription: d\n---\n{}", "p".repeat(70_000)),
        );
        fs::create_dir_all(agents.join("dir.md")).unwrap();
        write(
            &agents,
            "twin.md",
            "---\nname: good\ndescription: d\n---\nP",
        );

        let (set, warnings) = load_roles(None, Some(project.path()));
        assert_eq!(
            set.names().collect::<Vec<_>>(),
            ["general", "explorer", "good"]
        );
        assert_eq!(warnings.len(), 11, "{warnings:#?}");
        let expect = [
            ("bad-yaml.md", "line 2: YAML front matter"),
            ("bad-toml.md", "line 2: TOML front matter"),
            ("unknown-key.md", "unknown field `color`"),
            ("bad-value.md", "`max_turns` is 0"),
            ("empty-body.md", "prompt is empty"),
            ("Bad Name.md", "not a role name"),
            ("long-description.md", "600 characters"),
            ("latin1.md", "not valid UTF-8"),
            ("huge.md", "64 KiB"),
            ("dir.md", "not a regular file"),
            ("twin.md", "already defined by"),
        ];
        for (file, text) in expect {
            let warning = warning_for(&warnings, file);
            assert!(warning.message.contains(text), "{warning}");
            let shown = warning.to_string();
            assert!(
                shown.starts_with(&agents.join(file).display().to_string()),
                "{shown}"
            );
        }
    }

    #[test]
    fn size_limit_is_exact() {
        let project = tempfile::tempdir().unwrap();
        let agents = project_agents(project.path());
        let head = "---\ndescription: d\n---\n";
        let fits = MAX_ROLE_FILE_BYTES as usize - head.len();
        write(&agents, "fits.md", &format!("{head}{}", "p".repeat(fits)));
        write(
            &agents,
            "over.md",
            &format!("{head}{}", "p".repeat(fits + 1)),
        );
        let (set, warnings) = load_roles(None, Some(project.path()));
        assert!(set.get("fits").is_some());
        assert!(set.get("over").is_none());
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].message.contains("65537 bytes"),
            "{}",
            warnings[0]
        );
    }

    #[test]
    fn at_most_64_files_per_directory() {
        let project = tempfile::tempdir().unwrap();
        let agents = project_agents(project.path());
        for i in 0..70 {
            write(&agents, &format!("r{i:02}.md"), GOOD_YAML);
        }
        let (set, warnings) = load_roles(None, Some(project.path()));
        assert_eq!(set.len(), 2 + MAX_ROLE_FILES_PER_DIR);
        assert!(set.get("r63").is_some());
        assert!(set.get("r64").is_none());
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert_eq!(warnings[0].path, agents);
        assert!(
            warnings[0]
                .message
                .contains("6 role files ignored (from r64.md)"),
            "{}",
            warnings[0]
        );
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_may_not_leave_their_root() {
        use std::os::unix::fs::symlink;
        let outside = tempfile::tempdir().unwrap();
        let secret = write(outside.path(), "secret.md", GOOD_YAML);
        let project = tempfile::tempdir().unwrap();
        let agents = project_agents(project.path());
        let inside = write(
            project.path(),
            "docs.md",
            "---\ndescription: in repo\n---\nP",
        );
        fs::create_dir_all(&agents).unwrap();
        symlink(&secret, agents.join("escape.md")).unwrap();
        symlink("../../docs.md", agents.join("inside.md")).unwrap();
        symlink(agents.join("missing"), agents.join("dangling.md")).unwrap();
        assert!(inside.exists());

        let (set, warnings) = load_roles(None, Some(project.path()));
        assert_eq!(
            set.names().collect::<Vec<_>>(),
            ["general", "explorer", "inside"]
        );
        assert_eq!(warnings.len(), 2, "{warnings:#?}");
        assert!(
            warning_for(&warnings, "escape.md")
                .message
                .contains("outside the project root")
        );
        assert!(
            warning_for(&warnings, "dangling.md")
                .message
                .contains("cannot be resolved")
        );

        // User roles: the root is the user config directory.
        let user = tempfile::tempdir().unwrap();
        let user_agents = user.path().join("agents");
        fs::create_dir_all(&user_agents).unwrap();
        symlink(&secret, user_agents.join("escape.md")).unwrap();
        let (_, warnings) = load_roles(Some(user.path()), Some(project.path()));
        let warning = warning_for(&warnings, "escape.md");
        assert!(
            warning
                .message
                .contains("outside the user configuration directory"),
            "{warning}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn an_agents_directory_leaving_the_root_is_skipped() {
        use std::os::unix::fs::symlink;
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret.md", GOOD_YAML);
        let project = tempfile::tempdir().unwrap();
        fs::create_dir_all(project.path().join(".troupe")).unwrap();
        symlink(outside.path(), project_agents(project.path())).unwrap();
        let (set, warnings) = load_roles(None, Some(project.path()));
        assert_eq!(set, RoleSet::builtin());
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(
            warnings[0].message.contains("outside the project root"),
            "{}",
            warnings[0]
        );
    }

    #[cfg(unix)]
    #[test]
    fn fifos_are_not_read() {
        let project = tempfile::tempdir().unwrap();
        let agents = project_agents(project.path());
        fs::create_dir_all(&agents).unwrap();
        let fifo = agents.join("pipe.md");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let (_, warnings) = load_roles(None, Some(project.path()));
        assert!(
            warning_for(&warnings, "pipe.md")
                .message
                .contains("not a regular file")
        );
    }

    #[test]
    fn loading_is_deterministic() {
        let project = tempfile::tempdir().unwrap();
        let agents = project_agents(project.path());
        for name in ["m", "c", "x", "a"] {
            write(&agents, &format!("{name}.md"), GOOD_YAML);
        }
        let (first, _) = load_roles(None, Some(project.path()));
        let (second, _) = load_roles(None, Some(project.path()));
        assert_eq!(first, second);
        assert_eq!(
            first.names().collect::<Vec<_>>(),
            ["general", "explorer", "a", "c", "m", "x"]
        );
    }
}
