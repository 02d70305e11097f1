//! The file: TOML in, checked paths out, every error with the path, the stage and the
//! line it is on.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::PathError;

/// Back-ends a `from` may name at once.
const MAX_SOURCES: u32 = 4096;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    #[serde(default)]
    plugins: Vec<String>,
    element: Element,
    #[serde(default)]
    path: Vec<PathDoc>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathDoc {
    from: Spanned<String>,
    #[serde(default)]
    stages: Vec<Spanned<String>>,
}

/// Where every path ends: PATHS' element, on the tree's front-end.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Element {
    pub name: String,
    pub host: String,
}

/// One back-end a path starts from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Source {
    pub host: String,
    pub rank: u32,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.rank)
    }
}

/// What a path does at one host: a reduction, then the stages of the link to the next
/// host (none at the last host, the element's).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Segment {
    pub host: String,
    pub reduce: Option<String>,
    pub link: Vec<String>,
}

/// A stage as written, with its line (for messages about the tree it is part of).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StageRef {
    pub spec: String,
    pub line: usize,
}

/// One checked `[[path]]`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Path {
    /// 1-based, in file order.
    pub index: usize,
    pub line: usize,
    /// The `from` as written.
    pub from: String,
    pub sources: Vec<Source>,
    /// Python stages at the back-end end (before anything else).
    pub first: Vec<String>,
    /// The hosts in order, from the back-ends' to the element's.
    pub segments: Vec<Segment>,
    /// Python stages at the element end (after the last remote).
    pub last: Vec<String>,
    pub stages: Vec<StageRef>,
}

/// A checked path specification: one element and the paths to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathSpec {
    /// The file's name, for messages.
    pub file: String,
    pub element: Element,
    /// C stage plugins to load, resolved against the file's directory.
    pub plugins: Vec<PathBuf>,
    pub paths: Vec<Path>,
}

fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

impl PathSpec {
    /// Reads and checks a file; plugins are resolved against its directory.
    pub fn load(path: &std::path::Path) -> Result<PathSpec, PathError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| PathError::File {
            file: file.clone(),
            at: None,
            reason: e.to_string(),
        })?;
        let mut spec = PathSpec::parse(&text, &file)?;
        if let Some(dir) = path.parent() {
            for p in &mut spec.plugins {
                if p.is_relative() {
                    *p = dir.join(&*p);
                }
            }
        }
        Ok(spec)
    }

    /// Checks the text of a file; `file` names it in messages.
    pub fn parse(text: &str, file: &str) -> Result<PathSpec, PathError> {
        let doc: Doc = toml::from_str(text).map_err(|e| PathError::File {
            file: file.to_string(),
            at: e.span().map(|s| line_col(text, s.start)),
            reason: e.message().trim().to_string(),
        })?;
        let bad_element = |reason: &str| PathError::File {
            file: file.to_string(),
            at: None,
            reason: format!("[element]: {reason}"),
        };
        if doc.element.name.trim().is_empty() {
            return Err(bad_element("name is empty"));
        }
        check_host(&doc.element.host).map_err(|r| bad_element(&format!("host: {r}")))?;
        if doc.path.is_empty() {
            return Err(PathError::File {
                file: file.to_string(),
                at: None,
                reason: "no [[path]]: a specification needs at least one".into(),
            });
        }
        let mut seen: BTreeMap<Source, usize> = BTreeMap::new();
        let mut paths = Vec::with_capacity(doc.path.len());
        for (i, p) in doc.path.iter().enumerate() {
            let path = parse_path(text, file, i + 1, p, &doc.element)?;
            for s in &path.sources {
                if let Some(other) = seen.insert(s.clone(), path.index) {
                    return Err(PathError::Path {
                        file: file.to_string(),
                        line: path.line,
                        path: path.index,
                        from: path.from.clone(),
                        stage: None,
                        reason: format!("back-end {s} already starts path {other}"),
                    });
                }
            }
            paths.push(path);
        }
        Ok(PathSpec {
            file: file.to_string(),
            element: doc.element,
            plugins: doc.plugins.into_iter().map(PathBuf::from).collect(),
            paths,
        })
    }

    /// The user stages the paths name (not built-in kinds, not Python), once each.
    pub fn user_stages(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .paths
            .iter()
            .flat_map(|p| p.segments.iter().flat_map(|s| s.link.iter()))
            .map(|s| vargr_stage::user::split_spec(s).0)
            .filter(|n| !vargr_stage::user::BUILT_IN_KINDS.contains(n))
            .map(String::from)
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

fn is_py(s: &Spanned<String>) -> bool {
    s.get_ref().trim().starts_with("py:")
}

fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("empty".into());
    }
    if let Some(c) = host
        .chars()
        .find(|c| c.is_whitespace() || matches!(c, ':' | ';' | '=' | '>'))
    {
        return Err(format!("{host:?} holds {c:?}"));
    }
    Ok(())
}

/// `host:rank` or `host:first-last`.
fn parse_sources(from: &str) -> Result<Vec<Source>, String> {
    let expected = "expected HOST:RANK or HOST:FIRST-LAST, e.g. n1:0-3";
    let (host, ranks) = from.trim().rsplit_once(':').ok_or(expected)?;
    check_host(host)?;
    let num = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| format!("{s:?}: {expected}"))
    };
    let (a, b) = match ranks.split_once('-') {
        Some((a, b)) => (num(a)?, num(b)?),
        None => (num(ranks)?, num(ranks)?),
    };
    if a > b {
        return Err(format!("range {a}-{b} is empty"));
    }
    if b - a >= MAX_SOURCES {
        return Err(format!("{} back-ends (at most {MAX_SOURCES})", b - a + 1));
    }
    Ok((a..=b)
        .map(|rank| Source {
            host: host.to_string(),
            rank,
        })
        .collect())
}

fn parse_path(
    text: &str,
    file: &str,
    index: usize,
    p: &PathDoc,
    element: &Element,
) -> Result<Path, PathError> {
    let line = line_col(text, p.from.span().start).0;
    let from = p.from.get_ref().clone();
    let fail = |line: usize, stage: Option<&str>, reason: String| PathError::Path {
        file: file.to_string(),
        line,
        path: index,
        from: from.clone(),
        stage: stage.map(String::from),
        reason,
    };
    let sources = parse_sources(&from).map_err(|r| fail(line, None, r))?;
    let mut segments = vec![Segment {
        host: sources[0].host.clone(),
        reduce: None,
        link: Vec::new(),
    }];
    let (mut first, mut last) = (Vec::new(), Vec::new());
    let mut stages = Vec::with_capacity(p.stages.len());
    let n = p.stages.len();
    for (k, s) in p.stages.iter().enumerate() {
        let spec = s.get_ref().trim().to_string();
        let sline = line_col(text, s.span().start).0;
        let bad = |reason: String| fail(sline, Some(&spec), reason);
        let (kind, params) = vargr_stage::user::split_spec(&spec);
        let seg = segments.last_mut().expect("one segment at least");
        match kind {
            "remote" => {
                check_host(params).map_err(|r| bad(format!("remote:HOST: host {r}")))?;
                if params == seg.host {
                    return Err(bad(format!("the path is on {params} already")));
                }
                segments.push(Segment {
                    host: params.to_string(),
                    reduce: None,
                    link: Vec::new(),
                });
            }
            "reduce" => {
                if params.is_empty() {
                    return Err(bad("reduce:FILTER names a filter, e.g. reduce:sum".into()));
                }
                if !seg.link.is_empty() {
                    return Err(bad(format!(
                        "a reduction runs at host {} before the link stages that leave it ({}): list it first",
                        seg.host,
                        seg.link.join(", ")
                    )));
                }
                if let Some(r) = &seg.reduce {
                    return Err(bad(format!("host {} reduces with {r} already", seg.host)));
                }
                seg.reduce = Some(params.to_string());
            }
            "py" => {
                vargr_stage::user::check_name(params).map_err(|e| bad(e.to_string()))?;
                if p.stages[..k].iter().all(is_py) {
                    first.push(params.to_string());
                } else if p.stages[k..].iter().all(is_py) && segments.len() > 1 {
                    last.push(params.to_string());
                } else {
                    return Err(bad(
                        "a Python stage runs at an end of a path: first, or after the last remote"
                            .into(),
                    ));
                }
            }
            _ => {
                if kind != "codec" && kind != "dedup" && kind != "emu" {
                    vargr_stage::user::check_name(kind).map_err(|e| bad(e.to_string()))?;
                }
                if k + 1 == n
                    || !p.stages[k + 1..]
                        .iter()
                        .any(|s| s.get_ref().trim().starts_with("remote:"))
                {
                    return Err(bad(
                        "a link stage needs a link: put it before a remote:HOST".into(),
                    ));
                }
                seg.link.push(spec.clone());
            }
        }
        stages.push(StageRef { spec, line: sline });
    }
    let end = &segments.last().expect("one segment at least").host;
    if *end != element.host {
        return Err(fail(
            line,
            None,
            format!(
                "ends on host {end}, but element {} is on {}: add remote:{}",
                element.name, element.host, element.host
            ),
        ));
    }
    Ok(Path {
        index,
        line,
        from,
        sources,
        first,
        segments,
        last,
        stages,
    })
}
