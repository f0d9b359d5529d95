//! Skills: `<project>/.troupe/skills/NAME/SKILL.md` and
//! `<user config dir>/skills/NAME/SKILL.md`, Markdown with front matter
//! (`description`, optional `name`) whose body is instructions the model loads
//! on demand with the `load_skill` tool ([`LoadSkill`]).
//!
//! The catalogue (names and descriptions, sorted by name) goes into the stable
//! part of the system prompt, so it is byte-identical for the whole session.
//! Skill files may come from cloned repositories: names are validated, each
//! file is read through a size cap, symlinks may not leave their root, and a
//! broken file is skipped with a [`SkillWarning`] naming it. A project skill
//! replaces a user skill of the same name.
//!
//! [`commands`] loads custom chat commands the same way.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::builtin::{Builtin, BuiltinTool, ToolClass};
use crate::registry::valid_tool_name;
use crate::{ToolContext, ToolOutput};
use troupe_config::front_matter::{key_prefix, one_line, parse_front_matter, split_front_matter};
use troupe_paths::PROJECT_DIR_NAME;
use troupe_paths::SKILLS_DIR_NAME;

pub mod commands;

/// File of a skill inside its directory.
pub(crate) const SKILL_FILE_NAME: &str = "SKILL.md";
/// Name of the tool that loads a skill's body.
pub(crate) const LOAD_SKILL_TOOL_NAME: &str = "load_skill";
/// Largest skill body kept, in bytes; longer bodies are cut with a note, like
/// project instruction files.
pub(crate) const SKILL_BODY_MAX_BYTES: usize = crate::skills::INSTRUCTION_FILE_MAX_BYTES;
/// Bytes read from one `SKILL.md`: the body cap plus room for front matter.
const SKILL_FILE_READ_BYTES: u64 = SKILL_BODY_MAX_BYTES as u64 + 8 * 1024;
/// Skill directories read per root, in name order, so a hostile repository
/// cannot flood the system prompt.
pub(crate) const MAX_SKILLS_PER_DIR: usize = 64;
/// Longest description in characters: it is sent with every request.
pub(crate) const MAX_SKILL_DESCRIPTION_CHARS: usize = 500;
/// Note appended to a body that was cut.
const CUT_NOTE: &str = "\n[skill cut: file too long]";

/// The keys of a skill's front matter.
const SKILL_KEYS_HINT: &str = "`description: ...` (and optional name)";

/// One skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Name passed to `load_skill` (`^[A-Za-z0-9_-]{1,64}$`).
    pub name: String,
    /// One line: when to load this skill (whitespace collapsed).
    pub description: String,
    /// The instructions (possibly cut).
    pub body: String,
    /// The `SKILL.md` it came from.
    pub path: PathBuf,
}

/// A skill file (or directory) that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct SkillWarning {
    /// The file or directory.
    pub path: PathBuf,
    /// What is wrong and what to fix.
    pub message: String,
}

impl SkillWarning {
    pub(crate) fn new(path: &Path, message: impl Into<String>) -> Self {
        Self {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }
}

/// The skills of a session, sorted by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillSet {
    skills: BTreeMap<String, Skill>,
}

impl SkillSet {
    /// The skills of the user config directory (when given) and of
    /// `<project_root>/.troupe/skills/` (when given: `None` leaves the
    /// project's skills out, as for a project that is not trusted); a project
    /// skill replaces a user skill of the same name. A missing directory is
    /// not reported.
    pub fn load(
        user_config_dir: Option<&Path>,
        project_root: Option<&Path>,
    ) -> (SkillSet, Vec<SkillWarning>) {
        let (skills, warnings) =
            load_layered(user_config_dir, project_root, SKILLS_DIR_NAME, load_dir);
        tracing::debug!(
            skills = skills.len(),
            warnings = warnings.len(),
            "skills loaded"
        );
        (SkillSet { skills }, warnings)
    }

    /// The names of the skills `<project_root>/.troupe/skills/` defines (the
    /// files that load), sorted: what a project that is not trusted leaves
    /// out.
    pub fn project_skill_names(project_root: &Path) -> Vec<String> {
        let dir = project_root.join(PROJECT_DIR_NAME).join(SKILLS_DIR_NAME);
        load_dir(&dir, project_root, &mut Vec::new())
            .into_keys()
            .collect()
    }

    /// A set of the given skills (later ones replace earlier ones of the same name).
    pub fn from_skills(skills: impl IntoIterator<Item = Skill>) -> Self {
        Self {
            skills: skills.into_iter().map(|s| (s.name.clone(), s)).collect(),
        }
    }

    /// The skill called `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.get(name)
    }

    /// The skills, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &Skill> {
        self.skills.values()
    }

    /// The names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.skills.keys().map(String::as_str)
    }

    /// Number of skills.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// True when there is no skill.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }
}

/// The catalogue section of the stable system prompt, or `None` without
/// skills. Sorted by name, so equal sets give identical bytes.
pub fn catalogue(skills: &SkillSet) -> Option<String> {
    if skills.is_empty() {
        return None;
    }
    let mut out = format!(
        "# Skills\nSkills are instructions for specific tasks. When a task matches one, call \
         {LOAD_SKILL_TOOL_NAME} with its name before you start, and follow what it says."
    );
    for skill in skills.iter() {
        out.push_str(&format!("\n- {}: {}", skill.name, skill.description));
    }
    Some(out)
}

/// The entries of `dir_name` under the user config directory (when given)
/// and under `<project_root>/.troupe/` (when given), read by `load`; a
/// project entry replaces a user entry of the same name.
pub(crate) fn load_layered<T>(
    user_config_dir: Option<&Path>,
    project_root: Option<&Path>,
    dir_name: &str,
    load: impl Fn(&Path, &Path, &mut Vec<SkillWarning>) -> BTreeMap<String, T>,
) -> (BTreeMap<String, T>, Vec<SkillWarning>) {
    let mut warnings = Vec::new();
    let mut entries = BTreeMap::new();
    if let Some(dir) = user_config_dir {
        entries.extend(load(&dir.join(dir_name), dir, &mut warnings));
    }
    if let Some(project_root) = project_root {
        let dir = project_root.join(PROJECT_DIR_NAME).join(dir_name);
        entries.extend(load(&dir, project_root, &mut warnings));
    }
    (entries, warnings)
}

/// The entries of `dir` that `keep` accepts, sorted by name and cut to
/// `max` (a warning says how many were left out), with the canonical `root`
/// nothing may resolve outside of. `None` when there is nothing to read: no
/// such directory, or one that cannot be listed (a warning says so).
pub(crate) fn listed_entries(
    dir: &Path,
    root: &Path,
    what: &str,
    max: usize,
    keep: impl Fn(&std::ffi::OsStr) -> bool,
    warnings: &mut Vec<SkillWarning>,
) -> Option<(Vec<std::ffi::OsString>, PathBuf)> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return None;
        }
        Err(e) => {
            warnings.push(SkillWarning::new(
                dir,
                format!("cannot list the {what} directory ({e}); fix its permissions"),
            ));
            return None;
        }
    };
    let canonical_root = fs::canonicalize(root).ok()?;
    let mut names: Vec<std::ffi::OsString> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.file_name())
        .filter(|name| keep(name))
        .collect();
    names.sort();
    if names.len() > max {
        warnings.push(SkillWarning::new(
            dir,
            format!(
                "{} {what} entries ignored: at most {max} are read per directory, in name \
                 order; remove the ones you do not use",
                names.len() - max
            ),
        ));
        names.truncate(max);
    }
    Some((names, canonical_root))
}

/// The skills of one root's `skills/` directory, keyed by name. `root` is the
/// directory nothing may resolve outside of.
fn load_dir(dir: &Path, root: &Path, warnings: &mut Vec<SkillWarning>) -> BTreeMap<String, Skill> {
    let mut skills = BTreeMap::new();
    let Some((names, canonical_root)) =
        listed_entries(dir, root, "skills", MAX_SKILLS_PER_DIR, |_| true, warnings)
    else {
        return skills;
    };
    for name in names {
        let skill_dir = dir.join(&name);
        let path = skill_dir.join(SKILL_FILE_NAME);
        let dir_name = name.to_string_lossy();
        if !valid_tool_name(&dir_name) {
            warnings.push(SkillWarning::new(
                &skill_dir,
                "is not a skill name; skipped: use 1 to 64 of A-Z a-z 0-9 _ -",
            ));
            continue;
        }
        let text = match read_skill_file(&path, &canonical_root) {
            Ok(Some(text)) => text,
            Ok(None) => continue,
            Err(message) => {
                warnings.push(SkillWarning::new(&path, message));
                continue;
            }
        };
        match parse_skill(&text, &dir_name, &path) {
            Ok(skill) => {
                if let Some(first) = skills.get(&skill.name) {
                    let first: &Skill = first;
                    warnings.push(SkillWarning::new(
                        &path,
                        format!(
                            "skill `{}` is already defined by {}; skipped: give one of them \
                             another `name`",
                            skill.name,
                            first.path.display()
                        ),
                    ));
                } else {
                    skills.insert(skill.name.clone(), skill);
                }
            }
            Err(message) => warnings.push(SkillWarning::new(&path, message)),
        }
    }
    skills
}

/// Reads one `SKILL.md`: `None` when the directory has none (not a skill),
/// otherwise at most [`SKILL_FILE_READ_BYTES`] of it, lossily decoded. It must
/// resolve inside `canonical_root`.
pub(crate) fn read_skill_file(
    path: &Path,
    canonical_root: &Path,
) -> Result<Option<String>, String> {
    let real = match fs::canonicalize(path) {
        Ok(real) => real,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read the file ({e})")),
    };
    if !real.starts_with(canonical_root) {
        return Err(format!(
            "resolves to {}, outside {}; skipped: copy the file here instead",
            real.display(),
            canonical_root.display()
        ));
    }
    let meta = fs::metadata(&real).map_err(|e| format!("cannot read the file ({e})"))?;
    if !meta.is_file() {
        return Err("is not a regular file; it must be a Markdown file".into());
    }
    let file = fs::File::open(&real).map_err(|e| format!("cannot read the file ({e})"))?;
    let mut bytes = Vec::new();
    file.take(SKILL_FILE_READ_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the file ({e})"))?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// The front matter keys. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping of name, description")]
struct SkillFrontMatter {
    name: Option<String>,
    description: Option<String>,
}

/// Parses one `SKILL.md`. `dir_name` is the skill directory's name, the
/// default name. The error says what to fix.
pub(crate) fn parse_skill(text: &str, dir_name: &str, path: &Path) -> Result<Skill, String> {
    let split = split_front_matter(text, SKILL_KEYS_HINT)?;
    let front: SkillFrontMatter = parse_front_matter(split.syntax, split.front)?;
    let at = |key: &str| key_prefix(split.front, key);
    let name = front.name.unwrap_or_else(|| dir_name.to_owned());
    if !valid_tool_name(&name) {
        return Err(format!(
            "{}`name`: {:?} is not a skill name; use 1 to 64 of A-Z a-z 0-9 _ -",
            at("name"),
            name.chars().take(80).collect::<String>()
        ));
    }
    let description = one_line(front.description.as_deref().unwrap_or_default());
    if description.is_empty() {
        return Err(format!(
            "{}missing `description`: add one line saying when to use this skill",
            at("description")
        ));
    }
    let chars = description.chars().count();
    if chars > MAX_SKILL_DESCRIPTION_CHARS {
        return Err(format!(
            "{}`description` has {chars} characters, more than {MAX_SKILL_DESCRIPTION_CHARS}; \
             shorten it (it is sent with every request)",
            at("description")
        ));
    }
    let body = cut_body(split.body.trim());
    if body.is_empty() {
        return Err(
            "the body is empty; write the skill's instructions after the front matter".into(),
        );
    }
    Ok(Skill {
        name,
        description,
        body,
        path: path.to_path_buf(),
    })
}

/// `body` cut to [`SKILL_BODY_MAX_BYTES`] at a char boundary, with a note.
pub(crate) fn cut_body(body: &str) -> String {
    if body.len() <= SKILL_BODY_MAX_BYTES {
        return body.to_owned();
    }
    let mut cut = SKILL_BODY_MAX_BYTES;
    while !body.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{CUT_NOTE}", &body[..cut])
}

/// The `load_skill` tool: returns a skill's instructions. Read-only and a
/// system tool, so read-only roles, allowlisted roles and plan mode keep it.
pub struct LoadSkill {
    skills: Arc<SkillSet>,
    description: String,
}

impl LoadSkill {
    /// The tool over `skills`, with the schema of its arguments.
    pub fn new(skills: Arc<SkillSet>) -> Builtin<Self> {
        Builtin::new(Self {
            skills,
            description: "Loads the instructions of a skill listed under Skills in the system \
                          prompt. Load a skill before starting a task it covers."
                .into(),
        })
    }

    /// The result of loading `name`: its body, or an error listing the names.
    pub fn load(&self, name: &str) -> ToolOutput {
        match self.skills.get(name) {
            Some(skill) => ToolOutput::ok(format!("# Skill: {}\n\n{}", skill.name, skill.body)),
            None => {
                let known: Vec<&str> = self.skills.names().collect();
                let shown: String = name.chars().take(80).collect();
                ToolOutput::error(format!(
                    "Unknown skill {shown:?}. Known skills: {}.",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ))
            }
        }
    }
}

/// The arguments of `load_skill`; its schema is derived from them.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadSkillArgs {
    /// Skill name from the Skills list.
    name: String,
}

impl BuiltinTool for LoadSkill {
    type Args = LoadSkillArgs;
    const NAME: &'static str = LOAD_SKILL_TOOL_NAME;
    const CLASS: ToolClass = ToolClass::READ.system();

    fn description(&self) -> &str {
        &self.description
    }

    fn run<'a>(&'a self, args: Self::Args, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move { self.load(&args.name) })
    }
}

/// Largest instruction file loaded, in bytes; longer files are cut with a note.
pub const INSTRUCTION_FILE_MAX_BYTES: usize = 40_000;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tool;
    use crate::testing::assert_schema_matches;

    #[test]
    fn load_skill_schema_is_derived_from_its_arguments() {
        let tool = LoadSkill::new(Arc::new(SkillSet::default()));
        assert_schema_matches::<LoadSkillArgs>(tool.input_schema());
    }

    fn write_skill(root: &Path, dir: &str, text: &str) -> PathBuf {
        let dir = root.join(dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(SKILL_FILE_NAME);
        fs::write(&path, text).unwrap();
        path
    }

    fn project_skills(root: &Path) -> PathBuf {
        root.join(".troupe").join("skills")
    }

    fn text(output: &ToolOutput) -> String {
        output
            .content
            .iter()
            .map(|part| match part {
                troupe_protocol::model::ToolOutputPart::Text { text } => text.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn parses_yaml_and_toml_skills() {
        let skill = parse_skill(
            "---\ndescription: Release  the\n  crate\n---\n\nRun cargo publish.\n",
            "release",
            Path::new("/p/SKILL.md"),
        )
        .unwrap();
        assert_eq!(skill.name, "release");
        assert_eq!(skill.description, "Release the crate");
        assert_eq!(skill.body, "Run cargo publish.");
        let skill = parse_skill(
            "+++\nname = \"Other_1\"\ndescription = \"d\"\n+++\nB",
            "dir",
            Path::new("/p"),
        )
        .unwrap();
        assert_eq!(skill.name, "Other_1");
    }

    #[test]
    fn bad_front_matter_says_what_to_fix() {
        let path = Path::new("/p/SKILL.md");
        for (text, needle) in [
            ("no front matter", "has no front matter"),
            ("---\ndescription: d\nBody", "never closed"),
            ("---\nname: x\n---\nB", "missing `description`"),
            (
                "---\ndescription: d\nname: ../etc\n---\nB",
                "line 3: `name`",
            ),
            ("---\ndescription: d\nname: a b\n---\nB", "not a skill name"),
            (
                "---\ndescription: d\ntools: x\n---\nB",
                "line 3: YAML front matter",
            ),
            ("---\ndescription: d\n---\n  \n", "the body is empty"),
        ] {
            let err = parse_skill(text, "ok", path).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
        let long = format!("---\ndescription: {}\n---\nB", "x".repeat(501));
        assert!(
            parse_skill(&long, "ok", path)
                .unwrap_err()
                .contains("501 characters")
        );
        assert!(parse_skill("---\ndescription: d\n---\nB", &"x".repeat(65), path).is_err());
    }

    #[test]
    fn huge_body_is_cut_like_instruction_files() {
        let text = format!(
            "---\ndescription: d\n---\n{}",
            "é".repeat(SKILL_BODY_MAX_BYTES)
        );
        let skill = parse_skill(&text, "big", Path::new("/p")).unwrap();
        assert!(skill.body.ends_with(CUT_NOTE));
        assert!(skill.body.len() <= SKILL_BODY_MAX_BYTES + CUT_NOTE.len());
    }

    #[test]
    fn project_overrides_user_and_bad_files_warn_naming_the_file() {
        let user = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        write_skill(
            &user.path().join("skills"),
            "deploy",
            "---\ndescription: user deploy\n---\nUser body",
        );
        write_skill(
            &user.path().join("skills"),
            "lint",
            "---\ndescription: user lint\n---\nLint body",
        );
        write_skill(
            &project_skills(project.path()),
            "deploy",
            "---\ndescription: project deploy\n---\nProject body",
        );
        let bad = write_skill(&project_skills(project.path()), "broken", "no front matter");
        // A directory without SKILL.md is not a skill and not an error.
        fs::create_dir_all(project_skills(project.path()).join("notes")).unwrap();
        let (set, warnings) = SkillSet::load(Some(user.path()), Some(project.path()));
        assert_eq!(set.names().collect::<Vec<_>>(), ["deploy", "lint"]);
        assert_eq!(set.get("deploy").unwrap().body, "Project body");
        assert_eq!(set.get("lint").unwrap().description, "user lint");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(warnings[0].path, bad);
        assert!(warnings[0].to_string().contains("broken/SKILL.md"));

        // Without the project: the user's skills only; the project's named.
        let (set, warnings) = SkillSet::load(Some(user.path()), None);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(set.names().collect::<Vec<_>>(), ["deploy", "lint"]);
        assert_eq!(set.get("deploy").unwrap().body, "User body");
        assert_eq!(SkillSet::project_skill_names(project.path()), ["deploy"]);
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_may_not_leave_the_root() {
        let outside = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let secret = write_skill(outside.path(), "x", "---\ndescription: d\n---\nSecret");
        let dir = project_skills(project.path()).join("leak");
        fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(&secret, dir.join(SKILL_FILE_NAME)).unwrap();
        let (set, warnings) = SkillSet::load(None, Some(project.path()));
        assert!(set.is_empty());
        assert!(warnings[0].message.contains("outside"), "{warnings:?}");
    }

    #[test]
    fn catalogue_is_sorted_and_stable() {
        let skill = |name: &str| Skill {
            name: name.into(),
            description: format!("about {name}"),
            body: "b".into(),
            path: PathBuf::from("/p"),
        };
        assert_eq!(catalogue(&SkillSet::default()), None);
        let a = catalogue(&SkillSet::from_skills([skill("zeta"), skill("alpha")])).unwrap();
        let b = catalogue(&SkillSet::from_skills([skill("alpha"), skill("zeta")])).unwrap();
        assert_eq!(a, b);
        assert!(a.starts_with("# Skills\n"));
        assert!(
            a.ends_with("\n- alpha: about alpha\n- zeta: about zeta"),
            "{a}"
        );
    }

    #[test]
    fn load_skill_returns_the_body_or_lists_known_names() {
        let set = SkillSet::from_skills([Skill {
            name: "deploy".into(),
            description: "d".into(),
            body: "Step one.".into(),
            path: PathBuf::from("/p"),
        }]);
        let tool = LoadSkill::new(Arc::new(set));
        let found = tool.tool().load("deploy");
        assert!(!found.is_error);
        assert_eq!(text(&found), "# Skill: deploy\n\nStep one.");
        let missing = tool.tool().load("../../etc/passwd");
        assert!(missing.is_error);
        assert!(
            text(&missing).contains("Known skills: deploy."),
            "{}",
            text(&missing)
        );
        assert!(tool.read_only() && tool.is_system());
        assert_eq!(
            tool.category(),
            troupe_protocol::permission::ToolCategory::Read
        );
    }

    #[test]
    fn load_skill_stays_for_read_only_and_allowlisted_tool_sets() {
        let mut registry = crate::builtin_registry();
        registry
            .register(Arc::new(LoadSkill::new(Arc::new(SkillSet::default()))))
            .unwrap();
        assert!(registry.read_only_subset().contains(LOAD_SKILL_TOOL_NAME));
        assert!(registry.filtered(&["grep"]).contains(LOAD_SKILL_TOOL_NAME));
    }
}
